"""Backbones with a selectable attention per stage."""
from .biformer import LiSABiFormer
from .pvt import LiSAPVT
from .swin import LiSASwinTransformer
from .vit import LiSAViT

__all__: list[str] = ['LiSABiFormer', 'LiSAPVT', 'LiSASwinTransformer', 'LiSAViT']
