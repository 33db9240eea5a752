"""BiFormer's attentions (Zhu et al., CVPR 2023, https://arxiv.org/abs/2303.08810).

* :class:`BiLevelRoutingAttention` ('bra'): region-level top-k routing, token
  attention inside the routed regions, local context enhancement (stages 1-3);
* :class:`LePEAttention` ('lepe'): global softmax attention plus a depthwise
  convolution of the input (BiFormer's last stage, where every region is routed).

Both follow the layout of the official implementation (github.com/rayleizhu/BiFormer,
``ops/bra_legacy.py`` and ``models/_common.py``) so that its checkpoints load
(:func:`..backbones.biformer.convert_biformer_checkpoint`) and give its outputs.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layers import check_heads, check_tokens, merge_heads, merge_partitions, pad_grid, partition, split_heads
from .registry import register_attention


def _check_odd(name: str, value: int) -> None:
    if value < 1 or value % 2 == 0:
        raise ValueError(f'{name}={value} must be a positive odd int')


def _check_drop(name: str, value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f'{name}={value} must be in [0, 1)')


def _check_no_prefix(num_prefix_tokens: int) -> None:
    if num_prefix_tokens != 0:
        raise ValueError(f'num_prefix_tokens={num_prefix_tokens}: BiFormer\'s attentions need every token '
                         'on the grid (0 prefix tokens)')


def _grid_conv(conv: nn.Conv2d, x: Tensor) -> Tensor:
    """A convolution of channel-last ``(B, H, W, C)`` maps, channel-last out."""
    return conv(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


@register_attention('bra')
class BiLevelRoutingAttention(nn.Module):
    """Bi-level routing attention (BRA, BiFormer §3.2).

    The ``(H, W)`` grid is zero-padded at the bottom/right to multiples of
    ``S = n_win`` and split into ``S x S`` regions of ``r = (H_p / S)(W_p / S)``
    tokens. With ``q, k (.., qk_dim)`` and ``v (.., dim)`` of every token::

        routing:  A_r = mean_region(q) mean_region(k)^T       (S^2, S^2)
                  I   = topk(A_r, k=topk) per row              (S^2, topk), no gradient
        tokens:   for a query in region i, per head
                  Y = softmax(q K_I^T * scale) V_I             K_I, V_I: the topk * r tokens of regions I[i]
        LCE:      Y <- Y + DWConv_{k x k}(V)                   depthwise on the (padded) value map
        output:   proj(Y), cropped to (H, W)

    ``scale`` defaults to ``qk_dim ** -0.5`` -- the official value: the whole
    query width, not the head width. Padded tokens are zero inputs, so their
    q, k, v are the projection biases; as in the official ``auto_pad`` they
    enter the region means, are attended to as keys and feed the LCE
    convolution (nothing is masked), and their outputs are cropped.

    Args:
        dim: token width C (= the value width).
        num_heads: heads of the token attention (must divide dim and qk_dim).
        n_win: regions per side S (7 at 224 px in classification, 8 at 512 px in
            BiFormer's segmentation).
        topk: routed regions per query region, 1 <= topk <= n_win^2.
        qk_dim: width of q and k (default dim).
        qk_scale: temperature of the token attention (default ``qk_dim ** -0.5``).
        lce_kernel_size: odd kernel of the LCE depthwise conv (official ``side_dwconv``).
        qkv_bias: bias of the q, k, v projection.
        attn_drop: dropout of the token attention weights.
        proj_drop: dropout after the output projection.
        num_prefix_tokens: must be 0 (every token lies on the grid).
        pos_shape, block_index: backbone context (``..attention`` contract), unused.
    """

    def __init__(self, dim: int, num_heads: int, n_win: int = 7, topk: int = 4, qk_dim: int | None = None,
                 qk_scale: float | None = None, lce_kernel_size: int = 5, qkv_bias: bool = True,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, num_prefix_tokens: int = 0,
                 pos_shape: Sequence[int] | None = None, block_index: int = 0) -> None:
        super().__init__()
        del pos_shape, block_index  # backbone context that BRA has no use for
        _check_no_prefix(num_prefix_tokens)
        self.qk_dim = qk_dim or dim
        check_heads(dim, num_heads)
        check_heads(self.qk_dim, num_heads)
        if n_win < 1:
            raise ValueError(f'n_win={n_win} must be a positive int')
        if not 1 <= topk <= n_win ** 2:
            raise ValueError(f'topk={topk} must be in [1, n_win^2 = {n_win ** 2}]')
        _check_odd('lce_kernel_size', lce_kernel_size)
        _check_drop('attn_drop', attn_drop)
        self.dim, self.num_heads, self.n_win, self.topk = dim, num_heads, n_win, topk
        self.scale = qk_scale or self.qk_dim ** -0.5
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 2 * self.qk_dim + dim, bias=qkv_bias)
        self.lce = nn.Conv2d(dim, dim, lce_kernel_size, padding=lce_kernel_size // 2, groups=dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def route(self, q: Tensor, k: Tensor) -> Tensor:
        """Indices of the ``topk`` regions each region attends to, ``(B, S^2, topk)``,
        from region tokens ``q, k (B, S^2, r, qk_dim)``; not differentiable."""
        with torch.no_grad():
            logits = (q.mean(2) * self.scale) @ k.mean(2).transpose(-2, -1)  # (B, S^2, S^2)
            return logits.topk(self.topk, dim=-1).indices

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        b, n, c = x.shape
        h, w = hw_shape
        s, heads = self.n_win, self.num_heads
        x = pad_grid(x, hw_shape, s)
        hp, wp = x.shape[1:3]
        rh, rw = hp // s, wp // s
        q, k, v = self.qkv(x).split([self.qk_dim, self.qk_dim, c], dim=-1)  # (B, Hp, Wp, .)
        lce = _grid_conv(self.lce, v)                                        # (B, Hp, Wp, C)

        q, k, v = (partition(t, rh, rw) for t in (q, k, v))                      # (B, S^2, r, .)
        index = self.route(q, k)                                             # (B, S^2, topk)
        batch = torch.arange(b, device=x.device)[:, None, None]
        k_sel = k[batch, index].flatten(2, 3)                                # (B, S^2, topk * r, qk_dim)
        v_sel = v[batch, index].flatten(2, 3)                                # (B, S^2, topk * r, C)

        def per_head(t: Tensor) -> Tensor:  # (B, S^2, L, h*d) -> (B * S^2, h, L, d)
            return split_heads(t.flatten(0, 1), heads)

        out = F.scaled_dot_product_attention(                               # (B * S^2, h, r, C / h)
            per_head(q), per_head(k_sel), per_head(v_sel), dropout_p=self.attn_drop if self.training else 0.0,
            scale=self.scale)
        out = merge_partitions(merge_heads(out).view(b, s * s, rh * rw, c), hp, wp, rh, rw)
        out = self.proj_drop(self.proj(out + lce))
        return out[:, :h, :w].reshape(b, n, c)


@register_attention('lepe')
class LePEAttention(nn.Module):
    """Softmax attention over all tokens plus a depthwise conv of the input::

        Y = proj( softmax(Q K^T / sqrt(d)) V + DWConv_{k x k}(X) )

    BiFormer's last stage (official ``AttentionLePE``: 8 heads, ``qkv`` without
    bias, ``side_dwconv = 5``), which stands for BRA routing every region.

    Args:
        dim, num_heads: width and heads (d = dim / num_heads).
        lepe_kernel_size: odd kernel of the depthwise conv on the input.
        qkv_bias, attn_drop, proj_drop, num_prefix_tokens, pos_shape, block_index:
            as in :class:`BiLevelRoutingAttention`.
    """

    def __init__(self, dim: int, num_heads: int, lepe_kernel_size: int = 5, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, num_prefix_tokens: int = 0,
                 pos_shape: Sequence[int] | None = None, block_index: int = 0) -> None:
        super().__init__()
        del pos_shape, block_index  # backbone context that this attention has no use for
        _check_no_prefix(num_prefix_tokens)
        check_heads(dim, num_heads)
        _check_odd('lepe_kernel_size', lepe_kernel_size)
        _check_drop('attn_drop', attn_drop)
        self.num_heads, self.attn_drop = num_heads, attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.lepe = nn.Conv2d(dim, dim, lepe_kernel_size, padding=lepe_kernel_size // 2, groups=dim)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        check_tokens(x, hw_shape, 0)
        b, n, c = x.shape
        q, k, v = (split_heads(t, self.num_heads) for t in self.qkv(x).chunk(3, dim=-1))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop if self.training else 0.0)
        lepe = _grid_conv(self.lepe, x.view(b, *hw_shape, c)).reshape(b, n, c)
        return self.proj_drop(self.proj(merge_heads(out) + lepe))
