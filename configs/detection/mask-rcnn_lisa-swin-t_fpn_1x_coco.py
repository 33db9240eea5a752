# Mask R-CNN 1x + LiSA-Swin-T on COCO: Table 4 of the paper, Swin-T LiSA row.
# The Swin authors' official 1x recipe (mask_rcnn_swin_tiny_patch4_window7_mstrain_480-800_adamw_1x,
# their 43.7 box / 39.8 mask AP baseline): multi-scale training, short side 480-800 in steps of 32
# with the long side <= 1333, or (DETR's second policy) resize to 400 / 500 / 600, random crop
# 384-600, resize to 480-800; AdamW lr 1e-4, betas (0.9, 0.999), weight decay 0.05 without decay
# on norms and position tables, drop-path 0.1, 500 iterations of linear warm-up, fp16, 12 epochs
# of 16 images (8 GPUs x 2) with lr x0.1 after epochs 8 and 11. The pipeline and optimiser come
# from mmdet's ms-crop AMP Swin config; its 3x schedule and 1000-iteration warm-up are replaced.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_amp-ms-crop-3x_coco.py', '../_base_/lisa_runtime.py',
    '../_base_/models/swin.py', '../_base_/no_weight_decay.py'
]

# ImageNet-1K weights of the backbone (the base's variable, whose URL it replaces): an
# mmpretrain checkpoint of configs/classification (keys 'backbone.*'), copied or linked here.
pretrained = 'pretrain/lisa-swin-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        **_base_.swin_backbone,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.', allow_new=['dense_norms'])))

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True, milestones=[8, 11], gamma=0.1)
]
optim_wrapper = dict(paramwise_cfg=_base_.no_decay)
