# LiSA-DeiT-T with a random walk truncated after T = 1 terms: Table 5 (73.34 top-1; T = 3 is
# ../deit-tiny_lisa_8xb128_in1k.py).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(num_steps=1)))
