"""Linear angular attention: the angular kernel of Castling-ViT (You et al., CVPR 2023), linearised.

The baseline of the LiSA paper's Table 5 (DeiT-S, 79.21 top-1).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor

from .base import KernelAttention, register_attention, split_heads


@register_attention('angular')
class AngularAttention(KernelAttention):
    """Attention with the linear terms of the angular kernel (Castling-ViT §3).

    Castling-ViT measures query-key similarity by the spectral angle of the
    unit vectors ``q^ = q / ||q||``, ``k^ = k / ||k||``:

        sim(q, k) = 1 - arccos(q^ . k^) / pi
                  = 1/2 + (q^ . k^) / pi + (arcsin(q^ . k^) - q^ . k^) / pi    (arccos = pi/2 - arcsin)

    and keeps only the terms linear in ``q^ . k^`` (the Taylor series of
    ``arcsin`` is ``x + x^3/6 + ...``; the residual has order 3 and more):

        sim_lin(q, k) = 1/2 + (q^ . k^) / pi       in [1/2 - 1/pi, 1/2 + 1/pi], always > 0

    Attention rows are normalised as for every kernel attention here:

        Y_i = sum_j sim_lin(q_i, k_j) v_j / sum_j sim_lin(q_i, k_j)
            = (1/2 mean_j v_j + q^_i (K^T V / n) / pi) / (1/2 + q^_i . mean_j k^_j / pi)

    which costs O(n d^2) (``K^T V`` first) and uses means, so fp16 does not
    overflow. Shapes: ``q, k (B, h, n, d)``, ``v (B, h, n, dv)``.

    Where this departs from Castling-ViT's published module: that code adds
    ``v_i / 2`` (the token's own value) instead of ``mean_j v_j / 2`` and
    L2-normalises each output token instead of dividing by the row sum; it
    also trains with an auxiliary masked softmax branch and a depthwise
    convolution over the token sequence. The LiSA paper names only the
    kernel, so the kernel is what this class implements; ``dwc=True`` adds
    the project's depthwise grid convolution on ``v`` as for the other
    kernel attentions. No feature map and no focusing: the kernel acts on
    the raw directions of ``q`` and ``k`` (after the positional encoding on
    ``k``, as for the other kernel attentions).
    """

    def __init__(self, dim: int, num_heads: int, focusing: bool = False, **kwargs) -> None:
        if focusing:
            raise ValueError('focusing=True is not valid for the angular kernel: FLatten\'s focusing function needs '
                             'non-negative features, the angular kernel uses the raw q, k directions')
        if 'feature_map' in kwargs:
            raise ValueError(f'feature_map={kwargs["feature_map"]!r} is not valid for the angular kernel: it uses '
                             'the raw q, k directions, with no feature map')
        super().__init__(dim, num_heads, focusing=False, **kwargs)

    def features(self, x: Tensor, hw_shape: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """Unit ``q^, k^`` and ``v``, each ``(B, h, N, d)``."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.positional_encoding is not None:
            k = k + self.positional_encoding(hw_shape)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))
        return F.normalize(q, dim=-1, eps=self.eps), F.normalize(k, dim=-1, eps=self.eps), v

    def mix(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        n = k.shape[-2]
        kv = k.transpose(-2, -1) @ (v / n)  # (B, h, d, dv): K^T V / n
        numerator = 0.5 * v.mean(dim=-2, keepdim=True) + (q @ kv) / math.pi
        denominator = 0.5 + (q * k.mean(dim=-2, keepdim=True)).sum(-1, keepdim=True) / math.pi
        return numerator / denominator
