"""Backbones with a selectable attention per stage, built from the shared parts of :mod:`.base`."""
from .pvt import LiSAPVT
from .swin import LiSASwinTransformer
from .vit import LiSAViT

__all__: list[str] = ['LiSAPVT', 'LiSASwinTransformer', 'LiSAViT']
