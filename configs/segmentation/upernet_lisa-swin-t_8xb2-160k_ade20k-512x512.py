# UperNet + LiSA-Swin-T on ADE20K, 512x512 crops: Table 3 of the paper, Swin-T LiSA row.
# The Swin authors' recipe, inherited from mmseg's Swin-T UperNet config: AdamW lr 6e-5,
# betas (0.9, 0.999), weight decay 0.01 without decay on norms and position tables, 1500
# iterations of linear warm-up then poly decay (power 1.0), 160k iterations of 16 images
# (8 GPUs x 2), UperHead 512 channels + auxiliary FCN head (loss weight 0.4), drop-path 0.3.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = [
    'mmseg::swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py',
    '../_base_/lisa_runtime.py', '../_base_/models/swin.py', '../_base_/no_weight_decay.py'
]

# ImageNet-1K weights of the backbone: an mmpretrain checkpoint of
# configs/classification (keys 'backbone.*'), copied or linked to this path. The classifier has no norms
# after stages 1-3, which this model adds: they start as initialised (allow_new=['dense_norms']).
pretrained = 'pretrain/lisa-swin-t_in1k.pth'
checkpoint_file = None  # the base's variable for the official Swin weights' URL; unused here

model = dict(
    type='LowMemoryEncoderDecoder',  # the base's EncoderDecoder, evaluating large images in bounded memory
    backbone=dict(
        _delete_=True,
        **_base_.swin_backbone,
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.', allow_new=['dense_norms'])))

optim_wrapper = dict(paramwise_cfg=_base_.no_decay)
# `--show-dir` (mmseg's test.py, `mim test`) draws every test image, not every 50th as mmseg's hook does by default.
default_hooks = dict(visualization=dict(interval=1))
