# Swin-T (shifted 7 x 7 window softmax attention in every stage): Table 1, Swin-T softmax row (81.30 top-1).
# The backbone is Swin-T (mmseg's SwinTransformer) layer for layer.
# Recipe: Swin's, as ./swin-tiny_lisa_8xb128_in1k.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './swin-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.swin_attention.softmax)
