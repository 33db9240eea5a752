# FLatten-Swin-T (focused linear attention in stages 1-2, windows in 3-4): Table 1, Swin-T FLatten row
# (82.10 top-1). Recipe: Swin's, as ./swin-tiny_lisa_8xb128_in1k.py states it (FLatten trains its Swin models with it); no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './swin-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.swin_attention.flatten)
