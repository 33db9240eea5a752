# LiSA-Swin-T on ImageNet-1K at 224 px: Table 1, Swin-T LiSA row (82.25 top-1).
# LiSA over the whole feature map in stages 1-2 (56 x 56 and 28 x 28 tokens), Swin's shifted
# 7 x 7 windows in stages 3-4, where FLatten-Swin places its linear attention.
# Recipe: Swin's (microsoft/Swin-Transformer, written out by mmpretrain's Swin-T config; FLatten-Swin
# trains with it too): 300 epochs of 1024 images (8 GPUs x 128, as Swin ran it; mmpretrain's config
# says 16 x 64), AdamW lr 1e-3, weight decay 0.05, 20-epoch warm-up, cosine to 1e-5, drop path 0.2,
# RandAugment, mixup 0.8 / cutmix 1.0, random erasing 0.25, label smoothing 0.1, gradient clipping at
# norm 5, no repeated augmentation. No departure from it (EMA is off in Swin's recipe as well).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py', '../_base_/lisa_runtime.py',
    '../_base_/models/swin.py', '../_base_/no_weight_decay.py'
]

model = dict(backbone=dict(_delete_=True, **_base_.swin_backbone, out_indices=(3, ), drop_path_rate=0.2))

train_dataloader = dict(batch_size=128)

optim_wrapper = dict(paramwise_cfg=_base_.no_decay)
