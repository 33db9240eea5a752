# BiFormer-T (bi-level routing attention) on ImageNet-1K at 224 px: Table 2, BiFormer-T row (81.4 top-1),
# and the ImageNet weights of the dense BiFormer configs.
# Recipe: BiFormer's (github.com/rayleizhu/BiFormer: main.py, configs/train_args.yaml, README), DeiT's:
# 300 epochs of 1024 images (8 GPUs x 128), AdamW lr 1e-3 (5e-4 x 1024 / 512), weight decay 0.05 (none
# on 1-D parameters: norms, biases), 5-epoch warm-up from 1e-6, cosine to 1e-5, no gradient clipping;
# RandAugment (m9, mstd 0.5, increasing), mixup 0.8 / cutmix 1.0, random erasing 0.25, label smoothing
# 0.1, repeated augmentation (3 repeats); drop path 0.1 for T: main.py's --drop-path default (also in
# configs/train_args.yaml), which no T command in the repository overrides.
# Departure: no EMA of the weights (BiFormer keeps one but evaluates the plain model).
# The classifier is BiFormer's: final BatchNorm (the backbone's `norm`), global average pooling, linear head.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py', '../_base_/lisa_runtime.py', '../_base_/models/biformer.py',
    '../_base_/no_weight_decay.py'
]

model = dict(
    type='ImageClassifier',
    backbone=dict(
        **_base_.biformer_backbone,
        **_base_.biformer_attention.bra,
        arch='tiny',
        out_indices=(3, ),
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        init_cfg=None,  # the backbone-wide truncated normal below, as in BiFormer
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        cal_acc=False),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

train_dataloader = dict(batch_size=128, sampler=dict(type='RepeatAugSampler', shuffle=True))

# The base keeps decay off norms, biases and 1-D parameters; the project's rule adds position tables
# and the attentions' own scalars (LiSA rows; BiFormer has neither).
optim_wrapper = dict(paramwise_cfg=_base_.no_decay, clip_grad=None)
warmup_epochs = 5
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
