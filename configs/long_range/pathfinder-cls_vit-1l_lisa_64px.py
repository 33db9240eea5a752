# Pathfinder classification (projects/lisa/long_range/tasks.py, `pathfinder_cls`): are the two markers
# on one contour? The lookup probe's 1-layer ViT and init (width 64, patch 4, no class token), its tokens averaged
# into a linear classifier (mmpretrain), with the lookup probe's optimizer (AdamW, lr 2e-3, clipping at 1) but
# batch 8 and 50 warm-up iterations.
# Data: `tools/long_range.py --generate-only --tasks pathfinder-cls --runs 1`.
# Budget 2000 iterations, the segmentation probes'. Pilot (CPU, single runs on draw 900, lr 1e-3-2e-3; easier
# curves than the sweep's: 16 px, one distractor, solid): in every run the logged loss stayed near ln 2
# (0.66-0.73) and all 200 held-out images got one class (48.5 % or 51.5 %, that class's share): 2000 images
# and 2000 iterations (softmax, LiSA T=3); 10000 images and 4000 iterations at batch 8 (softmax in 1 and
# 2 layers) and at batch 32 (softmax, LiSA T=3).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = ['mmpretrain::_base_/default_runtime.py', '../_base_/lisa_runtime.py']

data_root = 'data/long_range/pathfinder-cls/draw1000'
img_size = 64
max_iters = 2000

model = dict(
    type='ImageClassifier',
    data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=2, mean=[127.5] * 3, std=[64.0] * 3,
                           to_rgb=True),
    backbone=dict(
        type='LiSAViT', arch=dict(embed_dims=64, num_layers=1, num_heads=2, feedforward_channels=128),
        attn_cfgs=dict(type='lisa'), patch_size=4, pretrain_img_size=img_size, with_cls_token=False,
        out_type='avg_featmap', drop_path_rate=0.0,
        init_cfg=[dict(type='Kaiming', layer='Linear', a=5 ** 0.5, mode='fan_in', nonlinearity='leaky_relu',
                       distribution='uniform')]),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=2, in_channels=64,
              loss=dict(type='CrossEntropyLoss', loss_weight=1.0)))

pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
dataset = dict(type='CustomDataset', data_root=data_root, pipeline=pipeline)
train_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                        sampler=dict(type='InfiniteSampler', shuffle=True), dataset=dict(**dataset, data_prefix='train'))
val_dataloader = dict(batch_size=8, num_workers=0, persistent_workers=False,
                      sampler=dict(type='DefaultSampler', shuffle=False), dataset=dict(**dataset, data_prefix='val'))
test_dataloader = val_dataloader
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_evaluator = val_evaluator

optim_wrapper = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.01),
                     clip_grad=dict(max_norm=1.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, begin=0, end=50, by_epoch=False),
    dict(type='CosineAnnealingLR', eta_min=0.0, begin=50, end=max_iters, by_epoch=False)]
train_cfg = dict(by_epoch=False, max_iters=max_iters, val_interval=max_iters)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(logger=dict(interval=50), checkpoint=dict(type='CheckpointHook', by_epoch=False,
                                                               interval=max_iters, max_keep_ckpts=1))
randomness = dict(seed=0)
