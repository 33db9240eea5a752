"""Attention family: softmax, plain linear, FLatten and LiSA, built by name.

Depends on torch alone (no OpenMMLab import), so the operator and its
benchmarks run anywhere torch does.
"""
from .base import ATTENTIONS, KernelAttention, build_attention, register_attention
from .linear import FocusedLinearAttention, LinearAttention
from .lisa import LiSAAttention, set_implementation
from .softmax import SoftmaxAttention

__all__ = [
    'ATTENTIONS', 'build_attention', 'register_attention', 'KernelAttention', 'SoftmaxAttention',
    'LinearAttention', 'FocusedLinearAttention', 'LiSAAttention', 'set_implementation'
]
