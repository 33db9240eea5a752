# Semantic FPN + PVT-T (softmax attention with spatial reduction 8, 4, 2, 1): Table 3, PVT row.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'

pretrained = 'pretrain/pvt-t_in1k.pth'

model = dict(backbone=dict(**_base_.pvt_attention.softmax, init_cfg=dict(checkpoint=pretrained)))
