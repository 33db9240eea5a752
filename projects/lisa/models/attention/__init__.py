"""Attention family: softmax, Swin's window, plain linear, FLatten, linear angular, LiSA and BiFormer's, by name.

Every type is built by :func:`build_attention` from ``dict(type=NAME, **kwargs)`` through one
constructor contract (:data:`CONTEXT`); :func:`register_attention` adds a type (:mod:`.registry`).
Token/grid helpers and the positional encoding are in :mod:`.layers`, the kernelised attentions'
common part in :mod:`.base`. Depends on torch alone (no OpenMMLab import), so the operator and its
benchmarks run anywhere torch does.
"""
from . import inductor_workaround
from .angular import AngularAttention
from .base import KernelAttention
from .bra import BiLevelRoutingAttention, LePEAttention
from .layers import PositionalEncoding
from .linear import FocusedLinearAttention, LinearAttention
from .lisa import LiSAAttention, set_implementation
from .registry import ATTENTIONS, CONTEXT, build_attention, check_attention_type, register_attention
from .softmax import SoftmaxAttention
from .window import ShiftedWindowAttention

__all__ = [
    'ATTENTIONS', 'CONTEXT', 'build_attention', 'check_attention_type', 'register_attention', 'KernelAttention',
    'PositionalEncoding', 'SoftmaxAttention', 'ShiftedWindowAttention', 'LinearAttention', 'FocusedLinearAttention',
    'AngularAttention', 'LiSAAttention', 'BiLevelRoutingAttention', 'LePEAttention', 'set_implementation'
]

inductor_workaround.install()  # torch.compile of whole backbones (pytorch/pytorch#185510)
