# DeiT-T on mini-ImageNet with plain linear attention (LA, one hop) with the depthwise conv (D): Table 7 (73.3 top-1).
# Like every kernel attention here it keeps FLatten's learnable positional encoding on k (not one of
# the ablated F / D; the paper does not say whether its LA and GL rows keep it).
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(_delete_=True, type='linear', focusing=False, dwc=True)))
