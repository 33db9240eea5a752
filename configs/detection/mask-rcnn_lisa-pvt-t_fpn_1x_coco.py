# Mask R-CNN 1x + LiSA-PVT-T on COCO: Table 4 of the paper, PVT-T LiSA row.
# 12 epochs of 16 images (8 GPUs x 2), 500 iterations of linear warm-up, lr x0.1 after
# epochs 8 and 11, (1333, 800) inputs; the PVT recipe's AdamW lr 2e-4, weight decay 1e-4.
# Norms, position tables and the attentions' scalars do not decay, as in every config here (the
# PVT recipe decays everything; at 1e-4 the difference is below 0.1% of each weight).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py', 'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py', 'mmdet::_base_/default_runtime.py', '../_base_/lisa_runtime.py',
    '../_base_/models/pvt.py', '../_base_/no_weight_decay.py'
]

# ImageNet-1K weights of the backbone: an mmpretrain checkpoint of
# configs/classification (keys 'backbone.*'), copied or linked to this path.
pretrained = 'pretrain/lisa-pvt-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        **_base_.pvt_backbone,
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[64, 128, 320, 512]))

optim_wrapper = dict(
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4), paramwise_cfg=_base_.no_decay)
