# LiSA-DeiT-S with T = 5, global and local branches fused by the learned alpha: Table 6 (80.7 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(num_steps=5)))
