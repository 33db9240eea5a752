# LiSA-DeiT-S, global random-walk branch only: Table 6 (78.3 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './deit-small_lisa-t5_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(use_local=False)))
