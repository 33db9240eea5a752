# mask-rcnn_pvt-t_fpn_1x_coco.py with the ImageNet-1K weights of the softmax PVT-T that the mm libraries use (the PVT
# authors' release, which mmdet's PVT configs load), for a comparison with the LiSA and FLatten rows started from the
# same weights.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './mask-rcnn_pvt-t_fpn_1x_coco.py'

pretrained = 'https://github.com/whai362/PVT/releases/download/v2/pvt_tiny.pth'

model = dict(backbone=dict(init_cfg=dict(checkpoint=pretrained, prefix=None)))
