"""Projects built on the OpenMMLab stack."""
