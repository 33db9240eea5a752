# DeiT-T with plain linear attention (LA, one hop), without FLatten's focusing function (F) and
# depthwise conv (D): Table 7 (65.7 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(_delete_=True, type='linear', focusing=False, dwc=False)))
