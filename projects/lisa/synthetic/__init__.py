"""Synthetic data in the real formats of ADE20K, COCO and ImageNet (``tools/generate_data.py``)."""
from .synthetic import ADE20K_CLASSES, COCO_CATEGORIES, DATASETS, IMAGENET_CLASSES, Generated, check_params, generate

__all__ = ['generate', 'check_params', 'Generated', 'DATASETS', 'ADE20K_CLASSES', 'COCO_CATEGORIES',
           'IMAGENET_CLASSES']
