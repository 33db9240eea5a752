# BiFormer-B (bi-level routing attention) on ImageNet-1K at 224 px: Table 2, BiFormer-B row (84.3 top-1).
# The BiFormer-T recipe with drop path 0.4. BiFormer's repository states drop path only for S (0.15;
# T trains with its default 0.1); 0.4 for B is the value of the BiFormer paper as we recall it, not
# checked against the paper's text here.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './biformer-tiny_bra_8xb128_in1k.py'

model = dict(backbone=dict(arch='base', drop_path_rate=0.4), head=dict(in_channels=768))
