# Pointer probe (projects/lisa/long_range/tasks.py: pointer_scene): the lookup's model
# (./lookup_vit-1l_softmax_64px.py: 1-layer ViT, width 64, 2 heads, 4 px patches, 1x1 head) on a per-image
# random pointer map over 10 symbols; the query cells' label is the symbol reached after h hops, so the
# head has 10 classes (chance 10 %; a model blind to which ring holds which centre: 11.1 %).
# Data: `tools/long_range.py --generate-only --tasks pointer --runs 1` (hops 1-2 mixed, each query's own
# marked; 10000 training images: the sweep scores the 2-hop queries, the 1-hop ones make it trainable).
# Budget 4000 iterations. Pilot (CPU, 1 thread; branch wt-ptr's report): at hops=2 only, 2000 images and
# 2000 iterations nothing learns (every model 6.7-10.1 %); with hops 1-2, 10000 images, 4000 iterations:
# 2-layer softmax hop 2 38.9 / 35.8 % (seeds 0, 1), 1-layer 17.7 %, LiSA T=2 9.3 % (hop 1: 100 %).
# Training starts on a plateau at loss ln 10 whose exit time varies with the seed and draw for every
# attention: on one draw LiSA T=3 stayed on it for 4000 iterations (seeds 0, 1) while T=2 left it; on
# another (draw 5, seed 0) T=3 left it near iteration 3000 (hop 1 solved, loss 1.20) while T=2 stayed
# (loss 2.30 at 3400). So the paired runs, not one seed, decide.
_base_ = './lookup_vit-1l_softmax_64px.py'

data_root = 'data/long_range/pointer/draw1000'  # tools/long_range.py sets each run's draw
max_iters = 4000
classes = ('cream', 'rose', 'spring', 'navy', 'orchid', 'orange', 'azure', 'forest', 'aqua', 'lime')
model = dict(decode_head=dict(num_classes=len(classes)))
dataset = dict(data_root=data_root, metainfo=dict(classes=classes))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, begin=0, end=30, by_epoch=False),
    dict(type='CosineAnnealingLR', eta_min=0.0, begin=30, end=max_iters, by_epoch=False)]
default_hooks = dict(checkpoint=dict(interval=max_iters))
