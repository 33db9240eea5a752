# LiSA-DeiT-T on mini-ImageNet, global random-walk branch only (no 3x3 local branch, no alpha):
# Table 6 (73.7 top-1; both branches fused by the learned alpha, ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py: 76.3).
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(use_local=False)))
