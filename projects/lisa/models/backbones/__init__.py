"""Backbones with a selectable attention per stage."""
from .pvt import LiSAPVT
from .swin import LiSASwinTransformer
from .vit import LiSAViT

__all__: list[str] = ['LiSAPVT', 'LiSASwinTransformer', 'LiSAViT']
