# UperNet + Swin-T (shifted 7x7 window softmax attention in all stages): Table 3, Swin row.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py'

pretrained = 'pretrain/swin-t_in1k.pth'

model = dict(backbone=dict(**_base_.swin_attention.softmax, init_cfg=dict(checkpoint=pretrained)))
