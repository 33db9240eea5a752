# Pathfinder segmentation (projects/lisa/long_range/tasks.py, `pathfinder_seg`): which contour pixels
# are connected to the marked one, with the lookup probe's model and recipe (./lookup_vit-1l_softmax_64px.py)
# at 64 px. Pixels are binned by their distance along the contour (px) and the dash gaps crossed.
# Data: `tools/long_range.py --generate-only --tasks pathfinder-seg --runs 1` (the generator's default
# difficulty: curves of 32 px in dashes of 4 and gaps of 2, two distractors).
# Pilot (CPU, single runs on draw 900, lr 2e-3, 2000 iterations; class-balanced accuracy, chance 50 %):
# softmax 60.0 %, 2-layer softmax 62.4 %, LiSA T=3 66.7 %, T=inf 66.5 %. Each one labels most distractor
# pixels right (78-95 % at 8-64 px from the marker) and the connected ones within 8 px of it (57-86 %), but
# few of those 8-32 px along the curve (5-41 %): they mark the marker's surroundings, not the curve. On
# shorter curves (16 px, one distractor) softmax was at 62-63 %. One pilot run again: `tools/long_range.py
# --tasks pathfinder-seg --attentions softmax --layers 1 --lrs 2e-3 --select-runs 0 --runs 1 --first-run 900`.
_base_ = './lookup_vit-1l_softmax_64px.py'
data_root = 'data/long_range/pathfinder-seg/draw1000'
model = dict(backbone=dict(attn_cfgs=dict(type='lisa')))
dataset = dict(data_root=data_root, metainfo=dict(classes=('distractor', 'connected')))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
val_evaluator = dict(distance_bins=(0, 8, 16, 32, 64, 400))
test_evaluator = val_evaluator
