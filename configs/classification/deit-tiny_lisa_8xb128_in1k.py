# LiSA-DeiT-T on ImageNet-1K at 224 px: Table 1 of the paper, DeiT-T 224 LiSA row (74.54 top-1).
# LiSA (T = 3 steps, adaptive step weights, 3x3 local branch, FLatten's focusing and depthwise
# conv) in all 12 layers. Recipe: DeiT's, as facebookresearch/deit main.py runs it (the recipe of
# the paper's DeiT rows 72.2 / 79.8 and of every DeiT-based config here: Tables 1 and 5, the
# mini-ImageNet ablations). 300 epochs of 1024 images (8 GPUs x 128), AdamW lr 1e-3 (5e-4 x 1024 /
# 512), weight decay 0.05, 5-epoch warm-up from 1e-6, cosine to 1e-5, drop path 0.1, RandAugment
# (m9, mstd 0.5), mixup 0.8 / cutmix 1.0, random erasing 0.25, label smoothing 0.1, repeated
# augmentation (3 repeats), no gradient clipping. Built on mmpretrain's DeiT-T config, which departs
# from DeiT in four values restored here: drop path (none there), warm-up (20 epochs), gradient
# clipping (norm 5) and sampling (no repeated augmentation).
# Departures from DeiT's recipe: no EMA of the weights (DeiT keeps one but reports the plain model's
# accuracy); mmengine's schedule, which rises per iteration in the warm-up (DeiT's steps once per epoch)
# and runs its cosine over epochs 5-300 (timm's in DeiT over 0-300): at every epoch's start the lr is
# DeiT's through the warm-up and at most 1.5 % of the peak apart after it. Weight decay spares what DeiT spares (biases, norms, position table, class token) and
# the kernel attentions' own tables and scalars, which DeiT's model does not have
# (../_base_/no_weight_decay.py).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmpretrain::deit/deit-tiny_4xb256_in1k.py', '../_base_/lisa_runtime.py', '../_base_/models/deit.py',
    '../_base_/no_weight_decay.py'
]

model = dict(backbone=dict(_delete_=True, **_base_.deit_backbone))

train_dataloader = dict(batch_size=128, sampler=dict(type='RepeatAugSampler', num_repeats=3, shuffle=True))

optim_wrapper = dict(paramwise_cfg=_base_.no_decay, clip_grad=None)
warmup_epochs = 5
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
