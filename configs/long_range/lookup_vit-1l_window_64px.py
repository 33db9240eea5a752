# The long-range lookup probe of ./lookup_vit-1l_softmax_64px.py with window attention in its one layer.
_base_ = './lookup_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='window', window_size=7)))
