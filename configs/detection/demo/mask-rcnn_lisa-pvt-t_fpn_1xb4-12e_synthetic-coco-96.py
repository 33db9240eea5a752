# CPU demo of ../mask-rcnn_lisa-pvt-t_fpn_1x_coco.py on the small synthetic COCO of tools/demo.py
# (`python tools/generate_data.py coco --out data/synthetic --size 96 --num-train 64`).
# Same backbone, detector, optimiser, 1x schedule (12 epochs, lr x0.1 after epochs 8 and 11)
# and pipelines; the backbone starts, as in the paper, from the classifier pretrained first
# (here the demo's, configs/classification/demo/, copied to `pretrained` by tools/demo.py).
# Only these change: sizes (96 px high images instead of 800, FPN and head widths 64 instead
# of 256, 128 RoIs per image instead of 512, anchors half the size: the generated objects are
# 15-42 px, below the recipe's smallest anchor of 32 px), 4 images per step on one process,
# a one-epoch warm-up, evaluation at the end only and the data root.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = '../mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'

data_root = 'data/synthetic/coco/'
pretrained = 'pretrain/lisa-pvt-t_synthetic-imagenet-64px.pth'
scale = (160, 96)  # the recipe's (1333, 800) at the demo's size
width = 64

model = dict(
    backbone=dict(init_cfg=dict(checkpoint=pretrained)),
    neck=dict(out_channels=width),
    rpn_head=dict(in_channels=width, feat_channels=width, anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=width),
        bbox_head=dict(in_channels=width, fc_out_channels=4 * width),
        mask_roi_extractor=dict(out_channels=width),
        mask_head=dict(in_channels=width, conv_out_channels=width)),
    train_cfg=dict(rcnn=dict(sampler=dict(num=128))))

# The base pipelines with the demo's sizes.
sizes = dict(Resize=dict(scale=scale))
train_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.train_pipeline]
test_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.test_pipeline]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=0, persistent_workers=False, dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

param_scheduler = [
    dict(type='LinearLR', start_factor=0.001, by_epoch=True, begin=0, end=1, convert_to_iter_based=True),
    dict(type='MultiStepLR', begin=0, end=12, by_epoch=True, milestones=[8, 11], gamma=0.1)
]
train_cfg = dict(val_interval=12)
default_hooks = dict(logger=dict(interval=8), checkpoint=dict(interval=4))
randomness = dict(seed=0)
