# LiSA-DeiT-T trained from scratch at 384 px: Table 1, DeiT-T 384 LiSA row (77.54 top-1).
# Recipe: DeiT's 224-px recipe (./deit-tiny_lisa_8xb128_in1k.py) with 384-px crops (24 x 24 patches;
# the learnable position tables follow the grid) and DeiT's evaluation resize of 384 x 256 / 224 =
# 438 px followed by a 384-px centre crop. Departure: DeiT makes its 384-px models by fine-tuning the
# 224-px ones; the paper trains every Table 1 model 300 epochs from scratch, so this config does too.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa_8xb128_in1k.py'

img_size = 384
model = dict(backbone=dict(pretrain_img_size=img_size))

sizes = dict(RandomResizedCrop=dict(scale=img_size), ResizeEdge=dict(scale=438), CenterCrop=dict(crop_size=img_size))
train_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.train_pipeline]
test_pipeline = [{**t, **sizes.get(t['type'], {})} for t in _base_.test_pipeline]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
