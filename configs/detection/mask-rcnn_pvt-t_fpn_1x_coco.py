# Mask R-CNN 1x + PVT-T (softmax attention with spatial reduction 8, 4, 2, 1): Table 4, PVT-T baseline.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'

pretrained = 'pretrain/pvt-t_in1k.pth'

model = dict(backbone=dict(**_base_.pvt_attention.softmax, init_cfg=dict(checkpoint=pretrained)))
