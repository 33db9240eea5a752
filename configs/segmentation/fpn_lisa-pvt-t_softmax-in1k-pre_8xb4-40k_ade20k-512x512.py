# fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py started from the ImageNet-1K weights of the softmax PVT-T (the PVT
# authors' release, which mmdet's PVT configs load) instead of an ImageNet run of LiSA-PVT-T: every tensor the two
# models share is loaded; the attention's own tensors, which a softmax checkpoint lacks, start as when training from
# scratch (allow_new=['lisa_from_softmax']); the softmax model's tensors this one has no use for (spatial reductions,
# relative position tables, the classifier head) are listed in the log and left unused.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'

pretrained = 'https://github.com/whai362/PVT/releases/download/v2/pvt_tiny.pth'

model = dict(backbone=dict(init_cfg=dict(checkpoint=pretrained, prefix=None, allow_new=['lisa_from_softmax'])))
