# FLatten-PVT-S: Table 1, PVT-S FLatten row (81.70 top-1).
# Recipe: FLatten's PVT recipe, as ./pvt-tiny_lisa_8xb128_in1k.py states it (DeiT's values without repeated augmentation); no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './pvt-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.pvt_attention.flatten)
