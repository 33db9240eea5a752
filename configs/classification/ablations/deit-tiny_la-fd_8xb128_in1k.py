# DeiT-T with plain linear attention (LA, one hop) and F and D (FLatten's attention): Table 7 (74.4 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = '../deit-tiny_lisa_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(_delete_=True, type='linear', focusing=True, dwc=True)))
