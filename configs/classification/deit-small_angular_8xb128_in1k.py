# DeiT-S with linear angular attention in all layers: Table 5, linear angular attention row (79.21 top-1).
# Recipe: DeiT's, as ./deit-tiny_lisa_8xb128_in1k.py states it, with its departures.
# The attention is Castling-ViT's published module (You et al. 2023, github.com/GATECH-EIC/Castling-ViT):
# the angular kernel kept to its linear terms, the token's own value v_i / 2, each output token
# L2-normalised, plus a 9 x 1 depthwise conv over the token sequence (form='castling' of
# projects/lisa/models/attention/angular.py), with no positional encoding on k.
# Departs from Castling-ViT's training: no auxiliary masked-softmax branch (the LiSA paper names the
# angular attention only, and Table 5 compares attentions under one recipe).
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './deit-small_lisa_8xb128_in1k.py'

model = dict(backbone=_base_.deit_attention.angular)
