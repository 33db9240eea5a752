# UperNet + LiSA-Swin-T on ADE20K, 512x512 crops: Table 3 of the paper, Swin-T LiSA row.
# The Swin authors' recipe, inherited from mmseg's Swin-T UperNet config: AdamW lr 6e-5,
# betas (0.9, 0.999), weight decay 0.01 without decay on norms and position tables, 1500
# iterations of linear warm-up then poly decay (power 1.0), 160k iterations of 16 images
# (8 GPUs x 2), UperHead 512 channels + auxiliary FCN head (loss weight 0.4), drop-path 0.3.
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = 'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'

# ImageNet-1K weights of the backbone (the base's variable, whose URL it replaces): an
# mmpretrain checkpoint of configs/classification (keys 'backbone.*'), copied or linked here.
checkpoint_file = 'pretrain/lisa-swin-t_in1k.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='LiSASwinTransformer',
        arch='tiny',
        window_size=7,
        attn_cfgs=[dict(type='lisa'), dict(type='lisa'), dict(type='window'), dict(type='window')],
        pretrain_img_size=224,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint=checkpoint_file, prefix='backbone.')))

# No weight decay on the kernel attentions' learnable positional encoding either.
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'positional_encoding': dict(decay_mult=0.)}))
