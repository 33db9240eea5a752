# DeiT-T (softmax attention): Table 1, DeiT-T 224 softmax row (72.20 top-1, DeiT's own number).
# The model is mmpretrain's VisionTransformer 'deit-tiny' layer for layer.
# Recipe: DeiT's (facebookresearch/deit main.py), as ./deit-tiny_lisa_8xb128_in1k.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.softmax)
