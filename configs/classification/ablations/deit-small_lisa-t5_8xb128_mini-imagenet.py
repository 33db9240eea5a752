# LiSA-DeiT-S with T = 5 on mini-ImageNet, global and local branches fused by the learned alpha:
# Table 6 (80.7 top-1). DeiT trains S as T (../deit-small_lisa_8xb128_in1k.py does the same on ImageNet-1K).
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(arch='deit-small'), head=dict(in_channels=384))
