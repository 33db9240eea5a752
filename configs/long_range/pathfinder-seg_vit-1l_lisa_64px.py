# Pathfinder segmentation (projects/lisa/synthetic/long_range.py, `pathfinder_seg`): which contour pixels
# are connected to the marked one, with the lookup probe's model and recipe (./lookup_vit-1l_softmax_64px.py)
# at 64 px. Pixels are binned by their distance along the contour (px) and the dash gaps crossed.
# Data: `tools/long_range.py --generate-only --tasks pathfinder-seg --runs 1`.
_base_ = './lookup_vit-1l_softmax_64px.py'
data_root = 'data/long_range/pathfinder-seg/draw1000'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa')))
dataset = dict(data_root=data_root, metainfo=dict(classes=('distractor', 'connected')))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
val_evaluator = dict(distance_bins=(0, 8, 16, 32, 64, 400))
test_evaluator = val_evaluator
