# FLatten-PVT-T (focused linear attention in all stages, no spatial reduction) under the
# LiSA-PVT-T recipe: Table 1, PVT-T FLatten row (77.80 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './pvt-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.pvt_attention.flatten)
