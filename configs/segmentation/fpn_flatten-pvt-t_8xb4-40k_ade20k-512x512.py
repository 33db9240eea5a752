# Semantic FPN + FLatten-PVT-T (focused linear attention, no spatial reduction): Table 3, FLatten row.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'

pretrained = 'pretrain/flatten-pvt-t_in1k.pth'

model = dict(backbone=dict(**_base_.pvt_attention.flatten, init_cfg=dict(checkpoint=pretrained)))
