# Pointer probe (projects/lisa/synthetic/long_range.py: pointer_scene): the lookup's recipe
# (./lookup_vit-1l_softmax_64px.py: 1-layer ViT, width 64, 2 heads, 4 px patches, 1x1 head, 2000 iterations)
# on a per-image random pointer map over 10 symbols; the query cells' label is the symbol reached after
# h hops, so the head has 10 classes (chance 10 %; a model blind to which ring holds which centre: 11.1 %).
# Data: write_probe('pointer', 'data/long_range/pointer_hops2', 2000, 200, hops=2) (one hop count; a range such
# as hops=(1, 2) marks each query's own on its centre).
# Pilot (CPU, 1 thread, seeds 0-1; branch wt-ptr's report): at hops=2, 2000 images, 2000 iterations nothing
# learns (1-layer softmax 8.1 / 10.1 %, 2-layer 6.7 / 9.6 %, LiSA T=3 9.9 / 9.1 %, T=2 9.3 / 9.6 %; 2-layer at
# 4000 iterations 13.2 %; chance 10 %, bag floor 11.1 %). What did learn: hops=(1, 2) over 10000 training
# images and 4000 iterations (train_cfg.max_iters=4000 train_cfg.val_interval=4000 param_scheduler.1.end=4000
# default_hooks.checkpoint.interval=4000): 2-layer softmax hop 2 38.9 / 35.8 % (seeds 0, 1), 1-layer 17.7 %,
# LiSA T=2 9.3 % (hop 1: 100 % for all three), LiSA T=3 stuck at chance even at hop 1 (10.7 %).
_base_ = './lookup_vit-1l_softmax_64px.py'

data_root = 'data/long_range/pointer_hops2'
classes = ('cream', 'rose', 'spring', 'navy', 'orchid', 'orange', 'azure', 'forest', 'aqua', 'lime')
model = dict(decode_head=dict(num_classes=len(classes)))
dataset = dict(data_root=data_root, metainfo=dict(classes=classes))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
