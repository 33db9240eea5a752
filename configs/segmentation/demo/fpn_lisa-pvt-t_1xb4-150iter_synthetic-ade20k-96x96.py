# CPU demo of ../fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py on the small synthetic ADE20K of
# `python tools/generate_data.py ade20k --out data/synthetic --size 96` (tools/demo.py runs it).
# Same model, optimiser and pipelines; the backbone starts, as in the paper, from the classifier
# pretrained first (here the demo's, configs/classification/demo/, copied to `pretrained` by
# tools/demo.py). Only these change: image sizes (96 instead of 512 px), schedule (150 iterations
# of 4 images, one process), data root and BN instead of SyncBN.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = '../fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'

data_root = 'data/synthetic/ade/ADEChallengeData2016'
pretrained = 'pretrain/lisa-pvt-t_synthetic-imagenet-64px.pth'
crop_size = (96, 96)
scale = (384, 96)  # the recipe's (2048, 512) at the demo's size
max_iters = 150
norm_cfg = dict(type='BN', requires_grad=True)  # SyncBN needs CUDA and several processes

data_preprocessor = dict(size=crop_size)
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(init_cfg=dict(checkpoint=pretrained)),
    decode_head=dict(norm_cfg=norm_cfg))

# The base pipelines with the demo's sizes.
sizes = dict(RandomResize=dict(scale=scale), RandomCrop=dict(crop_size=crop_size), AlignResize=dict(scale=scale))
train_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.train_pipeline]
test_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.test_pipeline]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=0, persistent_workers=False, dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader

param_scheduler = [dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=max_iters, by_epoch=False)]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(logger=dict(interval=25), checkpoint=dict(interval=75))
randomness = dict(seed=0)
