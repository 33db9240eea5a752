# LiSA-DeiT-S on ImageNet-1K at 224 px: Table 1, DeiT-S 224 LiSA row (80.78 top-1).
# Recipe: DeiT's (facebookresearch/deit main.py), as ./deit-tiny_lisa_8xb128_in1k.py states it (DeiT trains T and S alike:
# 1024 images per step, lr 1e-3, drop path 0.1, repeated augmentation x3, no clipping); departures
# are those stated there (no EMA).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(arch='deit-small'), head=dict(in_channels=384))
