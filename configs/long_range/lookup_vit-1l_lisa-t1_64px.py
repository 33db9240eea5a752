# The long-range lookup probe of ./lookup_vit-1l_softmax_64px.py with LiSA T=1 in its one layer: the self-loop
# alone (S^0 V = V, no global path; not a one-step walk), i.e. LiSA's local branch and depthwise conv only.
_base_ = './lookup_vit-1l_softmax_64px.py'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa', num_steps=1)))
