# LiSA-DeiT-T on ImageNet-1K at 224 px: Table 1 of the paper, DeiT-T 224 LiSA row (74.54 top-1).
# LiSA (T = 3 steps, adaptive step weights, 3x3 local branch, FLatten's focusing and depthwise
# conv) in all 12 layers; everything else is mmpretrain's DeiT-T recipe with the DeiT paper's
# values where mmpretrain departs from them: drop path 0.1 and a 5-epoch warm-up.
# 300 epochs of 1024 images (8 GPUs x 128), AdamW lr 1e-3 (5e-4 x 1024 / 512), weight decay 0.05,
# cosine to 1e-5, RandAugment (m9, mstd 0.5), mixup 0.8 / cutmix 1.0, random erasing 0.25,
# label smoothing 0.1, gradient clipping at norm 5 (mmpretrain's DeiT config).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = [
    'mmpretrain::deit/deit-tiny_4xb256_in1k.py', '../_base_/lisa_runtime.py', '../_base_/models/deit.py',
    '../_base_/no_weight_decay.py'
]

model = dict(backbone=dict(_delete_=True, **_base_.deit_backbone))

train_dataloader = dict(batch_size=128)

optim_wrapper = dict(paramwise_cfg=_base_.no_decay)
warmup_epochs = 5
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
