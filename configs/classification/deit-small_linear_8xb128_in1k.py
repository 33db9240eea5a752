# DeiT-S with plain linear attention (ReLU features, one hop, no focusing, no depthwise conv) in all
# layers: Table 5, linear attention row (its value is not in our notes).
# Recipe: DeiT's (facebookresearch/deit main.py), as ./deit-tiny_lisa_8xb128_in1k.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.linear)
