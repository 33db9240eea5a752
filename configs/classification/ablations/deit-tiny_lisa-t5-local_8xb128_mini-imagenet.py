# LiSA-DeiT-T on mini-ImageNet, 3x3 local branch only (no random walk, no alpha): Table 6 (73.4 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(use_global=False)))
