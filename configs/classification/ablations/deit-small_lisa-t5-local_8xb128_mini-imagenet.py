# LiSA-DeiT-S on mini-ImageNet, 3x3 local branch only: Table 6 (78.1 top-1).
# Recipe: DeiT's on mini-ImageNet, as ./deit-small_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-small_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(use_global=False)))
