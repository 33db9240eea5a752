# The long-range lookup probe of ./lookup_vit-1l_softmax_64px.py with lisa-t5 attention in its one layer.
_base_ = './lookup_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=5)))
