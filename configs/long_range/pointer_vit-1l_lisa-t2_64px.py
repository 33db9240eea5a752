# The pointer probe of ./pointer_vit-1l_softmax_64px.py with lisa attention cut at T = 2 (one step of S: a
# one-hop walk, the control for T = 3) in its one layer.
_base_ = './pointer_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=2)))
