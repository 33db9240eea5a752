# Semantic FPN + LiSA-BiFormer-S on ADE20K, 512x512 crops: Table 2 of the paper, BiFormer-S LiSA row
# (49.5 mIoU). LiSA in place of bi-level routing attention in stages 1-3 (see
# projects/lisa/models/backbones/biformer.py); otherwise BiFormer's own Semantic FPN recipe.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './fpn_biformer-s_8xb4-80k_ade20k-512x512.py'

pretrained = 'pretrain/lisa-biformer-s_in1k.pth'

model = dict(backbone=dict(**_base_.biformer_attention.lisa, init_cfg=dict(checkpoint=pretrained)))
