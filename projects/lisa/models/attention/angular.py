"""Linear angular attention: the angular kernel of Castling-ViT (You et al., CVPR 2023), linearised.

The baseline of the LiSA paper's Table 5 (DeiT-S, 79.21 top-1), in two forms: the kernel alone
(``form='kernel'``) and Castling-ViT's published module (``form='castling'``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from .base import KernelAttention
from .layers import split_heads
from .registry import register_attention

#: ``'kernel'``: the row-normalised linear angular kernel; ``'castling'``: Castling-ViT's published module.
ANGULAR_FORMS = ('kernel', 'castling')


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

    ``form='kernel'`` (the default) normalises attention rows as every kernel
    attention here does:

        Y_i = sum_j sim_lin(q_i, k_j) v_j / sum_j sim_lin(q_i, k_j)
            = (1/2 mean_j v_j + q^_i (K^T V / n) / pi) / (1/2 + q^_i . mean_j k^_j / pi)

    ``form='castling'`` is Castling-ViT's published module (its repository's
    ``LinAngularAttention``): the constant term acts on the token's own value,
    each head's output token is L2-normalised, and a depthwise convolution with
    a ``seq_kernel_size x 1`` kernel (default 9, Castling-ViT's) runs along the token sequence:

        Y_i = u_i / ||u_i|| + sum_{|t| <= s//2} w_t v_{i+t},   u_i = 1/2 v_i + q^_i (K^T V) / pi

    with one kernel ``w`` per head, shared by the head's channels, no bias and
    zeros past the ends of the sequence (``v_{i+t} = 0`` there). The sequence is
    the tokens as the backbone lays them out: prefix (class) tokens first, then
    the grid row by row. Prefix tokens take part in the convolution as any
    other token, as in Castling-ViT's module, which convolves DeiT's token
    sequence with its class token in front: the first grid tokens see the class
    token, the class token its first grid neighbours in the sequence. The
    auxiliary masked-softmax branch that Castling-ViT trains with is not part
    of either form (the LiSA paper names only the angular attention).

    Both forms cost O(n d^2) (``K^T V`` first) and use means: the normalisation
    of ``u_i`` is unchanged by the factor 1/n, so fp16 does not overflow.
    Shapes: ``q, k (B, h, n, d)``, ``v (B, h, n, dv)``. No feature map and no
    focusing: the kernel acts on the raw directions of ``q`` and ``k`` (after
    the positional encoding on ``k`` when ``pos_shape`` is given, as for the
    other kernel attentions; Castling-ViT's module has none, pass
    ``pos_shape=None`` to leave it out). ``dwc=True`` adds the project's
    depthwise grid convolution on ``v`` to the kernel form; the Castling form
    has its sequence convolution instead.
    """

    def __init__(self, dim: int, num_heads: int, form: str = 'kernel', seq_kernel_size: int | None = None,
                 focusing: bool = False, **kwargs) -> None:
        if form not in ANGULAR_FORMS:
            raise ValueError(f'form={form!r} is not one of {ANGULAR_FORMS}')
        if focusing:
            raise ValueError('focusing=True is not valid for the angular kernel: FLatten\'s focusing function needs '
                             'non-negative features, the angular kernel uses the raw q, k directions')
        if 'feature_map' in kwargs:
            raise ValueError(f'feature_map={kwargs["feature_map"]!r} is not valid for the angular kernel: it uses '
                             'the raw q, k directions, with no feature map')
        if form == 'castling' and kwargs.get('dwc', False):
            raise ValueError("dwc=True is not valid with form='castling': that form has its own depthwise "
                             'convolution over the token sequence (seq_kernel_size)')
        if form == 'kernel' and seq_kernel_size is not None:
            raise ValueError(f"seq_kernel_size={seq_kernel_size} is only valid with form='castling' (the kernel "
                             'form has no sequence convolution)')
        seq_kernel_size = 9 if seq_kernel_size is None else seq_kernel_size  # Castling-ViT's
        if seq_kernel_size < 1 or seq_kernel_size % 2 == 0:
            raise ValueError(f'seq_kernel_size={seq_kernel_size} must be a positive odd int')
        super().__init__(dim, num_heads, focusing=False, **kwargs)
        self.form = form
        # (B, h, n, d) read as h channels of an (n, d) map: an (s x 1) kernel per head along the tokens
        self.seq_conv = (
            nn.Conv2d(num_heads, num_heads, (seq_kernel_size, 1), padding=(seq_kernel_size // 2, 0),
                      groups=num_heads, bias=False) if form == 'castling' else None)

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
        if self.seq_conv is not None:
            u = 0.5 * (v / n) + (q @ kv) / math.pi  # u_i / n
            return F.normalize(u, dim=-1, eps=self.eps) + self.seq_conv(v)
        numerator = 0.5 * v.mean(dim=-2, keepdim=True) + (q @ kv) / math.pi
        denominator = 0.5 + (q * k.mean(dim=-2, keepdim=True)).sum(-1, keepdim=True) / math.pi
        return numerator / denominator
