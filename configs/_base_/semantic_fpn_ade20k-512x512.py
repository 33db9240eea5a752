# Semantic FPN on ADE20K with 512x512 crops, as the PVT authors set it up (and BiFormer after them):
# mmseg's fpn_r50 model (FPN neck 256 and FPN head 128 channels), its ADE20K pipeline and runtime,
# evaluation at (2048, 512) with both sides rounded up to multiples of 32 (AlignResize). A config
# adds the backbone, the schedule and the optimiser.
_base_ = [
    'mmseg::_base_/models/fpn_r50.py', 'mmseg::_base_/datasets/ade20k.py', 'mmseg::_base_/default_runtime.py',
    './lisa_runtime.py'
]

crop_size = (512, 512)
data_preprocessor = dict(size=crop_size)
model = dict(
    type='LowMemoryEncoderDecoder', data_preprocessor=data_preprocessor, pretrained=None,
    decode_head=dict(num_classes=150))

test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='AlignResize', scale=(2048, 512), size_divisor=32),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
