# PVT-S (softmax attention, spatial reduction 8, 4, 2, 1) under the LiSA-PVT-S recipe:
# Table 1, PVT-S softmax row (79.80 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './pvt-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.pvt_attention.softmax)
