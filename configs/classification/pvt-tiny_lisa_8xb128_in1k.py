# LiSA-PVT-T on ImageNet-1K at 224 px: Table 1, PVT-T LiSA row (78.53 top-1), and the ImageNet
# weights of the dense configs (configs/segmentation, configs/detection load `backbone.*`).
# LiSA in all four stages without spatial reduction. The PVT recipe (DeiT's): 300 epochs of 1024
# images (8 GPUs x 128), AdamW lr 1e-3 (5e-4 x 1024 / 512), weight decay 0.05, 5-epoch warm-up,
# cosine to 1e-5, drop path 0.1; augmentation as mmpretrain's DeiT/Swin configs express it:
# RandAugment (m9, mstd 0.5), mixup 0.8 / cutmix 1.0, random erasing 0.25, label smoothing 0.1,
# gradient clipping at norm 5.
# The classifier pools the last stage (GAP) into a linear head. PVT v1 instead normalises the
# last stage and reads a class token; LiSAPVT is the dense-prediction backbone and has neither,
# so the checkpoint holds exactly the backbone the dense configs build.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py'
]

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='LiSAPVT',
        arch='tiny',
        attn_cfgs=dict(type='lisa', num_steps=3),
        pretrain_img_size=224,  # the dense configs' value: same position tables, loaded as they are
        out_indices=(3, ),
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        init_cfg=None,  # the classifier's truncated normal below, as in PVT
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        cal_acc=False),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))

train_dataloader = dict(batch_size=128)

# No weight decay on position tables and on FLatten's per-channel feature scale (as on norms);
# LiSA's per-head mixing logit `alpha` is 1-D and covered by the base's flat_decay_mult=0.
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '.pos_embed': dict(decay_mult=0.0),
        '.positional_encoding': dict(decay_mult=0.0),
        '.scale': dict(decay_mult=0.0),
    }),
    clip_grad=dict(max_norm=5.0))
warmup_epochs = 5
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=warmup_epochs, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs),
]
