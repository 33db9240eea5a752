# mini-ImageNet for classification, the dataset of the paper's ablations (Fig. 3, Tables 6-8): the
# 100 classes of Vinyals et al. 2016 / Ravi & Larochelle 2017, 600 ImageNet-1K training images
# each, split 500 train / 100 val per class (projects/lisa/datasets/mini_imagenet.py states the
# rule). tools/prepare_mini_imagenet.py links it from ImageNet-1K into
#     data/mini-imagenet/{train,val}/<wnid>/*.JPEG
# mmpretrain's CustomDataset reads the class folders (labels in sorted wnid order).
# An ImageNet config switches to it by replacing its datasets with these and its 1000 classes by 100.
mini_imagenet_classes = 100
mini_imagenet = dict(type='CustomDataset', data_root='data/mini-imagenet', with_label=True)
