# UperNet + FLatten-Swin-T (focused linear attention over the whole map in stages 1-2,
# shifted windows in stages 3-4): Table 3, FLatten row.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py'

pretrained = 'pretrain/flatten-swin-t_in1k.pth'

model = dict(backbone=dict(**_base_.swin_attention.flatten, init_cfg=dict(checkpoint=pretrained)))
