# The study's real dataset: 128-px tiles of a fluorescence image of cell nuclei (projects/lisa/dynamics/data.py),
# in ADE20K's layout with labels 1 background, 2 nucleus (0 unlabelled, none here). ADE20KDataset takes only its
# own classes: mmseg's BaseSegDataset reads the same layout with these two.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = './fpn_lisa-pvt-t_1xb4-200iter_scratch-synthetic-ade20k-96x96.py'

data_root = 'data/nuclei/ade/ADEChallengeData2016'
dataset = dict(
    type='BaseSegDataset', data_root=data_root, img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True,
    metainfo=dict(classes=('background', 'nucleus'), palette=[[0, 0, 0], [255, 64, 64]]))
model = dict(decode_head=dict(num_classes=2))
train_dataloader = dict(dataset=dataset)
val_dataloader = dict(dataset=dataset)
test_dataloader = val_dataloader
