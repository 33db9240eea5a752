# upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py started from the ImageNet-1K weights of the softmax Swin-T (mmseg's
# copy of the Swin authors' release, which mmseg's Swin UperNet configs load) instead of an ImageNet run of
# LiSA-Swin-T: every tensor the two models share is loaded; the attention's own tensors, which a softmax checkpoint
# lacks, start as when training from scratch (allow_new=['lisa_from_softmax']); the softmax model's tensors this one
# has no use for (spatial reductions, relative position tables, the classifier head) are listed in the log and left
# unused. The classifier has no norms after stages 1-3, which the dense model adds (norm0-2): they start from scratch,
# as in mmseg's and mmdet's Swin configs.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py'

pretrained = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'  # noqa: E501

model = dict(backbone=dict(
    init_cfg=dict(checkpoint=pretrained, prefix=None, allow_new=['lisa_from_softmax', 'dense_norms'])))
