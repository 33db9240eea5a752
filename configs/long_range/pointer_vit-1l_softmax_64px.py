# Pointer probe (projects/lisa/synthetic/long_range.py: pointer_scene): the lookup's recipe
# (./lookup_vit-1l_softmax_64px.py: 1-layer ViT, width 64, 2 heads, 4 px patches, 1x1 head, 2000 iterations)
# on a per-image random pointer map over 10 symbols; the query cells' label is the symbol reached after
# h hops, so the head has 10 classes (chance 10 %; a model blind to which ring holds which centre: 11.1 %).
# One hop-count per data set: write_probe('pointer', 'data/long_range/pointer_hops2', 2000, 200, hops=2).
_base_ = './lookup_vit-1l_softmax_64px.py'

data_root = 'data/long_range/pointer_hops2'
classes = ('cream', 'rose', 'spring', 'navy', 'orchid', 'orange', 'azure', 'forest', 'aqua', 'lime')
model = dict(decode_head=dict(num_classes=len(classes)))
dataset = dict(data_root=data_root, metainfo=dict(classes=classes))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
