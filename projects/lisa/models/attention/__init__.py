"""Attention family: softmax, Swin's window, plain linear, FLatten, linear angular, LiSA and BiFormer's, by name.

Every type is built by :func:`build_attention` from ``dict(type=NAME, **kwargs)`` through one
constructor contract (:data:`CONTEXT`); :func:`register_attention` adds a type (:mod:`.registry`).
Token/grid helpers and the positional encoding are in :mod:`.layers`, the kernelised attentions'
common part in :mod:`.base`, the operators they call (the walk, the neighbourhood attention, kernel
features, depthwise conv) and their one backend choice in :mod:`.ops`. Depends on torch alone (no
OpenMMLab import), so the operators and their benchmarks run anywhere torch does. Importing it
changes nothing outside it: the workaround of an inductor bug that whole backbones compiled with
``torch.compile`` need on torch 2.14 is applied by whoever compiles,
:func:`.inductor_workaround.install`.
"""
from . import ops
from .angular import AngularAttention
from .base import KernelAttention, set_backend
from .bra import BiLevelRoutingAttention, LePEAttention
from .layers import PositionalEncoding
from .linear import FocusedLinearAttention, LinearAttention
from .lisa import LiSAAttention
from .registry import ATTENTIONS, CONTEXT, build_attention, check_attention_type, register_attention
from .softmax import SoftmaxAttention
from .window import ShiftedWindowAttention

__all__ = [
    'ATTENTIONS', 'CONTEXT', 'build_attention', 'check_attention_type', 'register_attention', 'KernelAttention',
    'PositionalEncoding', 'SoftmaxAttention', 'ShiftedWindowAttention', 'LinearAttention', 'FocusedLinearAttention',
    'AngularAttention', 'LiSAAttention', 'BiLevelRoutingAttention', 'LePEAttention', 'ops', 'set_backend'
]
