# LiSA-PVT-S: Table 1, PVT-S LiSA row (81.96 top-1); the LiSA-PVT-T recipe (PVT trains T and S alike).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './pvt-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(arch='small'))
