# DeiT-S with linear angular attention (the angular kernel of Castling-ViT, You et al. 2023, kept to
# its linear terms: projects/lisa/models/attention/angular.py) in all layers, under the LiSA-DeiT-S
# recipe: Table 5, linear angular attention row (79.21 top-1).
custom_imports = dict(imports=['projects.lisa'], allow_failed_imports=False)
_base_ = './deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.angular)
