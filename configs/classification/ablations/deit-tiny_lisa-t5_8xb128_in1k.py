# LiSA-DeiT-T with a random walk truncated after T = 5 terms: Table 5 (75.73 top-1; T = 3 is
# ../deit-tiny_lisa_8xb128_in1k.py).
# T = 5 is also the setting of the DeiT ablations of Tables 6-8, which inherit this file.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(num_steps=5)))
