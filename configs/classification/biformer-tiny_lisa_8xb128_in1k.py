# LiSA-BiFormer-T on ImageNet-1K at 224 px: Table 2, BiFormer-T LiSA row (82.4 top-1).
# LiSA (T = 3) in place of bi-level routing attention in every block of stages 1-3, BiFormer's global
# attention kept in stage 4 (the choice is explained in projects/lisa/models/backbones/biformer.py);
# otherwise the BiFormer-T config. Recipe: BiFormer's, as ./biformer-tiny_bra_8xb128_in1k.py states it
# with its departures; no departure of its own.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './biformer-tiny_bra_8xb128_in1k.py'

model = dict(backbone=_base_.biformer_attention.lisa)
