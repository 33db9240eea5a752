# The pointer probe of ./pointer_vit-1l_softmax_64px.py with flatten attention in its one layer.
_base_ = './pointer_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='flatten')))
