"""LiSA models: the attention family and the backbones that use it."""
