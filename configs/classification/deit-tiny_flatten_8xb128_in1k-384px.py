# FLatten-DeiT-T at 384 px: Table 1, DeiT-T 384 FLatten row (76.53 top-1).
# Recipe: DeiT's, from scratch at 384 px, as ./deit-tiny_lisa_8xb128_in1k-384px.py states it with its
# departure; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa_8xb128_in1k-384px.py'

model = dict(backbone=_base_.deit_attention.flatten)
