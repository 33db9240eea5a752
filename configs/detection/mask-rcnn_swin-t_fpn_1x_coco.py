# Mask R-CNN 1x + Swin-T (shifted 7x7 window softmax attention in all stages): Table 4, Swin-T baseline
# (43.7 box / 39.8 mask AP with the official weights).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_lisa-swin-t_fpn_1x_coco.py'

pretrained = 'pretrain/swin-t_in1k.pth'

model = dict(backbone=dict(**_base_.swin_attention.softmax, init_cfg=dict(checkpoint=pretrained)))
