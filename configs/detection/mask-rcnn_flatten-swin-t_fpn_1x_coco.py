# Mask R-CNN 1x + FLatten-Swin-T (focused linear attention over the whole map in stages 1-2,
# shifted windows in stages 3-4): the FLatten row of Table 4's comparison.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_lisa-swin-t_fpn_1x_coco.py'

pretrained = 'pretrain/flatten-swin-t_in1k.pth'

model = dict(backbone=dict(**_base_.swin_attention.flatten, init_cfg=dict(checkpoint=pretrained)))
