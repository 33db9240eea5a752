# PVT-T (softmax attention, spatial reduction 8, 4, 2, 1): Table 1, PVT-T softmax row (75.10 top-1, PVT's
# own number, trained with PVT's recipe, which has repeated augmentation).
# Recipe: FLatten's PVT recipe, as ./pvt-tiny_lisa_8xb128_in1k.py states it (DeiT's values without repeated augmentation); no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './pvt-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.pvt_attention.softmax)
