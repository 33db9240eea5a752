# The long-range lookup probe of ./lookup_vit-1l_softmax_64px.py with LiSA T=2 (S^0 V + S^1 V: the self-loop
# and one step of the walk) in its one layer: the control that tells the walk (T=3) from LiSA's features,
# step weights and local branch.
_base_ = './lookup_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=2)))
