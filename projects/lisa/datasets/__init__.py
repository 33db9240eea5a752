"""Dataset-side pieces of the configs: the mini-ImageNet class list and split, registered transforms.

Importing this package imports no OpenMMLab library; :mod:`.transforms` (mmseg / mmcv) is
imported by :mod:`projects.lisa.registry` when mmseg is installed.
"""
