"""One-hop linear attention (Katharopoulos et al. 2020) and FLatten (Han et al. 2023)."""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from .base import KernelAttention
from .registry import register_attention


def linear_attention(q: Tensor, k: Tensor, v: Tensor, eps: float) -> Tensor:
    """``Y_i = q_i K^T V / (q_i K^T 1)`` in FLatten's mean form.

    ``kv = (K n^-1/2)^T (V n^-1/2)`` and ``z_i = 1 / (q_i . mean_j k_j + eps)``:
    every sum over the n tokens is a mean, so fp16 does not overflow.
    Shapes: ``q, k (B, h, n, d)``, ``v (B, h, n, dv)`` -> ``(B, h, n, dv)``.
    """
    n = k.shape[-2]
    kv = (k * n ** -0.5).transpose(-2, -1) @ (v * n ** -0.5)
    z = 1.0 / ((q * k.mean(dim=-2, keepdim=True)).sum(-1, keepdim=True) + eps)
    return (q @ kv) * z


@register_attention('linear')
class LinearAttention(KernelAttention):
    """Plain linear attention: a single hop ``S V`` on the token graph (paper §3).

    ``focusing`` and ``dwc`` add FLatten's components (the LA rows of Table 7).
    """

    def mix(self, q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int]) -> Tensor:
        return linear_attention(q, k, v, self.eps)


@register_attention('flatten')
class FocusedLinearAttention(LinearAttention):
    """FLatten: linear attention with the focusing function (p = 3), a learnable
    positional encoding on k and a depthwise 5x5 conv on v, as published."""

    def __init__(self, dim: int, num_heads: int, focusing: bool = True, dwc: bool = True, **kwargs) -> None:
        super().__init__(dim, num_heads, focusing=focusing, dwc=dwc, **kwargs)
