# The pointer probe of ./pointer_vit-1l_softmax_64px.py with two softmax layers: layer 1 lets the cue fetch
# the centre of the relay named by its own, layer 2 lets the query read the cue (2 hops).
_base_ = './pointer_vit-1l_softmax_64px.py'
model = dict(backbone=dict(arch=dict(num_layers=2)))
