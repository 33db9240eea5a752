# The pointer probe of ./pointer_vit-1l_softmax_64px.py with lisa attention (T = 3: S^2 V walks query -> cue
# -> relay, the 2 hops) in its one layer.
_base_ = './pointer_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=3)))
