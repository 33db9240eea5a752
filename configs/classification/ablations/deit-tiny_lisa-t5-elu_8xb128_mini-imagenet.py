# LiSA-DeiT-T on mini-ImageNet with the ELU + 1 feature map instead of ReLU: Table 8 (76.0 top-1;
# ReLU, ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py: 76.3).
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(feature_map='elu')))
