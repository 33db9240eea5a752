# LiSA-DeiT-T's global-local kernel (GL) on mini-ImageNet with the focusing function (F) only:
# Table 7 (69.3 top-1; GL + F + D is ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py, 76.3). FLatten's positional encoding on k is kept.
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(focusing=True, dwc=False)))
