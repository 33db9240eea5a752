# upernet_swin-t_8xb2-160k_ade20k-512x512.py with the ImageNet-1K weights of the softmax Swin-T that the mm libraries
# use (mmseg's copy of the Swin authors' release, which mmseg's Swin UperNet configs load), for a comparison with the
# LiSA and FLatten rows started from the same weights. The classifier has no norms after stages 1-3, which the dense
# model adds (norm0-2): they start from scratch, as in mmseg's and mmdet's Swin configs.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './upernet_swin-t_8xb2-160k_ade20k-512x512.py'

pretrained = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth'  # noqa: E501

model = dict(backbone=dict(init_cfg=dict(checkpoint=pretrained, prefix=None)))
