# DeiT-S (softmax attention): Table 1, DeiT-S 224 softmax row (79.80 top-1), and Table 5's softmax row
# (the same number, DeiT's own). Recipe: DeiT's (facebookresearch/deit main.py), as ./deit-tiny_lisa_8xb128_in1k.py states it;
# no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.softmax)
