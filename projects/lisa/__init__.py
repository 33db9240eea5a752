"""LiSA: Linear Stochastic Attention (arXiv 2611.04216) as an OpenMMLab extension.

Importing the package registers the LiSA backbones into the MODELS
registries of mmseg, mmdet and mmpretrain (see :mod:`.registry`).
"""
from .registry import register_all_modules

register_all_modules()
