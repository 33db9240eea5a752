# Mask R-CNN 1x + FLatten-PVT-T (focused linear attention, no spatial reduction): the FLatten
# row of Table 4's comparison.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'

pretrained = 'pretrain/flatten-pvt-t_in1k.pth'

model = dict(backbone=dict(**_base_.pvt_attention.flatten, init_cfg=dict(checkpoint=pretrained)))
