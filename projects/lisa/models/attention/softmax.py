"""Softmax attention, optionally with PVT's spatial reduction of keys and values."""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layers import check_heads, check_tokens, merge_heads, split_heads
from .registry import register_attention


@register_attention('softmax')
class SoftmaxAttention(nn.Module):
    """``softmax(Q K^T / sqrt(d)) V`` through ``scaled_dot_product_attention``.

    With ``sr_ratio > 1`` (PVT v1, Wang et al. 2021) keys and values come from
    the grid reduced by a strided ``sr x sr`` convolution and a LayerNorm;
    prefix tokens are kept unreduced. Quadratic in N: the baseline.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        sr_ratio: int = 1,
        num_prefix_tokens: int = 0,
        norm_eps: float = 1e-6,
        pos_shape: Sequence[int] | None = None,
        block_index: int = 0,
    ) -> None:
        super().__init__()
        del pos_shape, block_index  # context of the contract (base.CONTEXT) that softmax has no use for
        check_heads(dim, num_heads)
        if sr_ratio < 1:
            raise ValueError(f'sr_ratio={sr_ratio} must be a positive int')
        if not 0 <= attn_drop < 1:
            raise ValueError(f'attn_drop={attn_drop} must be in [0, 1)')
        self.num_heads, self.sr_ratio = num_heads, sr_ratio
        self.num_prefix_tokens = num_prefix_tokens
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim, eps=norm_eps)

    def _reduce(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        p = self.num_prefix_tokens
        b, _, c = x.shape
        grid = x[:, p:].transpose(1, 2).reshape(b, c, *hw_shape)
        grid = self.norm(self.sr(grid).flatten(2).transpose(1, 2))
        return torch.cat([x[:, :p], grid], dim=1)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        check_tokens(x, hw_shape, self.num_prefix_tokens)
        c = x.shape[-1]
        w, bias = self.qkv.weight, self.qkv.bias
        if self.sr_ratio == 1:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        else:
            q = F.linear(x, w[:c], None if bias is None else bias[:c])
            k, v = F.linear(self._reduce(x, hw_shape), w[c:], None if bias is None else bias[c:]).chunk(2, dim=-1)
        q, k, v = (split_heads(t, self.num_heads) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(merge_heads(out)))
