# Mask R-CNN 1x + LiSA-Swin-T on COCO: Table 4 of the paper, Swin-T LiSA row.
# The Swin recipe, inherited from mmdet's Swin-T Mask R-CNN 1x config: AdamW lr 1e-4,
# weight decay 0.05 without decay on norms and position tables, 1000 iterations of
# linear warm-up, lr x0.1 after epochs 8 and 11, 16 images per step, drop-path 0.2.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'

# ImageNet-1K weights of the backbone (the base's variable, whose URL it replaces): an
# mmpretrain checkpoint of configs/classification (keys 'backbone.*'), copied or linked here.
pretrained = 'pretrain/lisa-swin-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='LiSASwinTransformer',
        arch='tiny',
        window_size=7,
        attn_cfgs=[dict(type='lisa'), dict(type='lisa'), dict(type='window'), dict(type='window')],
        pretrain_img_size=224,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')))

# No weight decay on the kernel attentions' learnable positional encoding either.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'positional_encoding': dict(decay_mult=0.)}))
