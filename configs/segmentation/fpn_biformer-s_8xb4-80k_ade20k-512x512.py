# Semantic FPN + BiFormer-S on ADE20K, 512x512 crops: Table 2 of the paper, BiFormer-S row (48.9 mIoU, the
# BiFormer authors' own result). BiFormer's recipe (github.com/rayleizhu/BiFormer,
# semantic_segmentation/configs/ade20k/sfpn.biformer_small.py, after UniFormer): 8 x 8 regions (training
# at 512 px), drop path 0.15, SyncBN in the backbone's convolutions, AdamW lr 2e-4, weight decay 1e-4,
# 1000 iterations of linear warm-up from 0.1 x lr then cosine to 1e-8 x lr, 80k iterations of 32
# images (8 GPUs x 4), fp16 with loss scale 512, FPN neck 256 and FPN head 128 channels (mmseg's
# fpn_r50 base), mmseg's ADE20K pipeline, evaluated at (2048, 512) with both sides rounded up to
# multiples of 32 (AlignResize, as BiFormer's UniFormer-based pipeline does).
# Backbone outputs: LayerNorm on stages 1-3 (new, as BiFormer's dense model adds them); the last stage
# keeps the ImageNet classifier's BatchNorm, so the classifier checkpoint loads completely (BiFormer
# replaces it by a new LayerNorm: final_norm_cfg=dict(type='LN', eps=1e-6)).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    '../_base_/semantic_fpn_ade20k-512x512.py',
    'mmseg::_base_/schedules/schedule_80k.py', '../_base_/models/biformer.py'
]

# ImageNet-1K weights of the backbone: an mmpretrain checkpoint of configs/classification (keys
# 'backbone.*'), copied or linked to this path.
pretrained = 'pretrain/biformer-s_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        **_base_.biformer_backbone,
        **_base_.biformer_attention.bra_seg,
        arch='small',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.15,
        conv_norm_cfg=dict(type='SyncBN'),
        final_norm_cfg=dict(type='SyncBN'),
        out_norm_cfg=dict(type='LN', eps=1e-6),
        # every tensor from the ImageNet classifier except the new output norms of stages 1-3
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.',
                      allow_new=['norm0.*', 'norm1.*', 'norm2.*'])),
    neck=dict(in_channels=[64, 128, 256, 512]))

optim_wrapper = dict(
    _delete_=True,
    type='AmpOptimWrapper',
    loss_scale=512.0,
    optimizer=dict(type='AdamW', lr=2e-4, weight_decay=1e-4))
max_iters = 80000
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=1000),
    dict(type='CosineAnnealingLR', eta_min_ratio=1e-8, by_epoch=False, begin=0, end=max_iters),
]
train_cfg = dict(max_iters=max_iters, val_interval=4000)
# `--show-dir` (mmseg's test.py, `mim test`) draws every test image, not every 50th as mmseg's hook does by default.
default_hooks = dict(checkpoint=dict(interval=4000), visualization=dict(interval=1))
