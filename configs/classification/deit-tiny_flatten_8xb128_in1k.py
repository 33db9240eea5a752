# FLatten-DeiT-T (focused linear attention in all layers) under the LiSA-DeiT-T recipe:
# Table 1, DeiT-T 224 FLatten row (74.10 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.flatten)
