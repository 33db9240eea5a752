# mini-ImageNet for classification, the dataset of the paper's ablations (Fig. 3, Tables 6-8): the
# 100 classes of Vinyals et al. 2016 / Ravi & Larochelle 2017, 600 ImageNet-1K training images
# each, split 500 train / 100 val per class (projects/lisa/datasets/mini_imagenet.py states the
# rule).
# The images are this project's choice: the first 600 of each class by file name, at ImageNet's full
# resolution, so the configs crop 224 px from them as on ImageNet-1K. The common mini-ImageNet lists
# specific images per class (Ravi & Larochelle's csv files) and is usually stored resized to 84 x 84;
# the LiSA paper defines neither its images nor their resolution, so its figures may come from other
# images or smaller ones. tools/prepare_mini_imagenet.py links the images from ImageNet-1K into
#     data/mini-imagenet/{train,val}/<wnid>/*.JPEG
# mmpretrain's CustomDataset reads the class folders (labels in sorted wnid order).
# An ImageNet config switches to it by replacing its datasets with these and its 1000 classes by 100.
mini_imagenet_classes = 100
mini_imagenet = dict(type='CustomDataset', data_root='data/mini-imagenet', with_label=True)
