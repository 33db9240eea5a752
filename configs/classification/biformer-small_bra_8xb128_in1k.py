# BiFormer-S (bi-level routing attention) on ImageNet-1K at 224 px: Table 2, BiFormer-S row (83.8 top-1).
# The BiFormer-T recipe with drop path 0.15 (BiFormer's README training command).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './biformer-tiny_bra_8xb128_in1k.py'

model = dict(backbone=dict(arch='small', drop_path_rate=0.15))
