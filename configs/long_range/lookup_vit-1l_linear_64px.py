# The long-range lookup probe of ./lookup_vit-1l_softmax_64px.py with linear attention in its one layer.
_base_ = './lookup_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='linear')))
