# LiSA-PVT-S: Table 1, PVT-S LiSA row (81.96 top-1).
# Recipe: FLatten's PVT recipe, as ./pvt-tiny_lisa_8xb128_in1k.py states it (DeiT's values without repeated augmentation);
# PVT and FLatten train T and S alike. No departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './pvt-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(arch='small'))
