"""Backbones with a selectable attention per stage, built from the shared parts of :mod:`.base`."""
from .biformer import LiSABiFormer
from .pvt import LiSAPVT
from .swin import LiSASwinTransformer
from .vit import LiSADistilledViT, LiSAViT

__all__: list[str] = ['LiSABiFormer', 'LiSADistilledViT', 'LiSAPVT', 'LiSASwinTransformer', 'LiSAViT']
