# LiSA-DeiT-T with T = 5 on mini-ImageNet: the setting of all the paper's ablations (mini-ImageNet,
# T = 5). Fig. 3 at T = 5 (75.73 +- 0.47 over 3 runs) and the reference row of Tables 6-8 (76.3):
# learned alpha (Table 6), GL + F + D (Table 7), ReLU (Table 8).
# The LiSA-DeiT-T ImageNet-1K recipe (../deit-tiny_lisa_8xb128_in1k.py) on mini-ImageNet's 100
# classes (../../_base_/datasets/mini_imagenet.py); the paper gives no other schedule.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = ['../deit-tiny_lisa_8xb128_in1k.py', '../../_base_/datasets/mini_imagenet.py']

model = dict(backbone=dict(attn_cfgs=dict(num_steps=5)), head=dict(num_classes=_base_.mini_imagenet_classes))
data_preprocessor = dict(num_classes=_base_.mini_imagenet_classes)
train_dataloader = dict(
    dataset=dict(_delete_=True, **_base_.mini_imagenet, data_prefix='train', pipeline=_base_.train_pipeline))
val_dataloader = dict(
    dataset=dict(_delete_=True, **_base_.mini_imagenet, data_prefix='val', pipeline=_base_.test_pipeline))
test_dataloader = dict(
    dataset=dict(_delete_=True, **_base_.mini_imagenet, data_prefix='val', pipeline=_base_.test_pipeline))
