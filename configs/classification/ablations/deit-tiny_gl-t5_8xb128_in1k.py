# LiSA-DeiT-T's global-local kernel (GL) without FLatten's focusing function (F) and depthwise
# conv (D): Table 7 (69.2 top-1; GL + F + D is ./deit-tiny_lisa-t5_8xb128_in1k.py, 76.3).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './deit-tiny_lisa-t5_8xb128_in1k.py'

model = dict(backbone=dict(attn_cfg=dict(focusing=False, dwc=False)))
