# mask-rcnn_swin-t_fpn_1x_coco.py with the ImageNet-1K weights of the softmax Swin-T that the mm libraries use (the
# Swin authors' release, which mmdet's Swin Mask R-CNN configs load), for a comparison with the LiSA and FLatten rows
# started from the same weights. The classifier has no norms after stages 1-3, which the dense model adds (norm0-2):
# they start from scratch, as in mmseg's and mmdet's Swin configs.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_swin-t_fpn_1x_coco.py'

pretrained = 'https://github.com/SwinTransformer/storage/releases/download/v1.0.0/swin_tiny_patch4_window7_224.pth'  # noqa: E501

model = dict(backbone=dict(init_cfg=dict(checkpoint=pretrained, prefix=None)))
