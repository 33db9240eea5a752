# LiSA-DeiT-T's global-local kernel (GL) on mini-ImageNet without the focusing function (F) and the depthwise conv (D):
# Table 7 (69.2 top-1; GL + F + D is ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py, 76.3). FLatten's positional encoding on k is kept.
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(focusing=False, dwc=False)))
