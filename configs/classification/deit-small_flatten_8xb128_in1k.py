# FLatten-DeiT-S: Table 1, DeiT-S 224 FLatten row (80.10 top-1), and Table 5's FLatten row (the same number).
# Recipe: DeiT's (facebookresearch/deit main.py), as ./deit-tiny_lisa_8xb128_in1k.py states it; FLatten trains
# its DeiT models with DeiT's recipe too. No departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.flatten)
