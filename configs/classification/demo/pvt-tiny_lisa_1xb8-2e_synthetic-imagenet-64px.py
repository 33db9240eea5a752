# CPU variant of ../pvt-tiny_lisa_8xb128_in1k.py on the small synthetic ImageNet of
# `python tools/generate_data.py imagenet --out data/synthetic --num-train 40 --num-val 20 --size 64`
# (5 classes in mmpretrain's folder-per-class layout, classes read from the folder names).
# Same model (LiSA-PVT-T built for 224 px, so its checkpoint initialises the dense configs
# as it is), augmentation, loss and optimiser; only these change: 64-px crops (test: resize the
# short edge to 73 = 64 x 256 / 224, centre crop 64), 2 epochs of 8 images on one process with a
# 1-epoch warm-up, 5 classes, the data root.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../pvt-tiny_lisa_8xb128_in1k.py'

data_root = 'data/synthetic/imagenet'
img_size = 64
max_epochs = 2

model = dict(head=dict(num_classes=5))
data_preprocessor = dict(num_classes=5)

sizes = dict(RandomResizedCrop=dict(scale=img_size), ResizeEdge=dict(scale=73), CenterCrop=dict(crop_size=img_size))
train_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.train_pipeline]
test_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.test_pipeline]
train_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root, data_prefix='train',
                 pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root, data_prefix='val',
                 pipeline=test_pipeline))
test_dataloader = val_dataloader

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=1, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=1, end=max_epochs),
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(logger=dict(interval=1))
randomness = dict(seed=0)
