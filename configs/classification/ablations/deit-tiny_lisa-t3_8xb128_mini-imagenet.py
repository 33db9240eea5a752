# LiSA-DeiT-T on mini-ImageNet, random walk truncated after T = 3 terms: Fig. 3 (75.63 +- 0.39 top-1,
# mean +- std of 3 runs; T = 5 is ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py).
# Recipe: DeiT's on mini-ImageNet, as ./deit-tiny_lisa-t5_8xb128_mini-imagenet.py states it; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_mini-imagenet.py'

model = dict(backbone=dict(attn_cfgs=dict(num_steps=3)))
