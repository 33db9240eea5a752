# Semantic FPN + LiSA-PVT-T on ADE20K, 512x512 crops: Table 3 of the paper, PVT-T LiSA row.
# The PVT authors' recipe: AdamW lr 2e-4, weight decay 1e-4, poly decay (power 0.9) to 0,
# 40k iterations of 32 images (8 GPUs x 4), FPN neck 256 and FPN head 128 channels
# (mmseg's fpn_r50 base; 16.98M parameters with the softmax PVT-T, as in the PVT paper), and its
# evaluation at (2048, 512) with both sides rounded up to multiples of 32 (AlignResize).
# Norms, position tables and the attentions' scalars do not decay, as in every config here (the
# PVT recipe decays everything; at 1e-4 the difference is below 0.1% of each weight over 40k steps).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    '../_base_/semantic_fpn_ade20k-512x512.py',
    'mmseg::_base_/schedules/schedule_40k.py', '../_base_/models/pvt.py', '../_base_/no_weight_decay.py'
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
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=2e-4, weight_decay=1e-4),
    paramwise_cfg=_base_.no_decay)
param_scheduler = [dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=40000, by_epoch=False)]
# `--show-dir` (mmseg's test.py, `mim test`) draws every test image, not every 50th as mmseg's hook does by default.
default_hooks = dict(visualization=dict(interval=1))
