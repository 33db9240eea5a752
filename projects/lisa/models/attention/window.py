"""Swin's (shifted) window softmax attention (Liu et al., ICCV 2021, https://arxiv.org/abs/2103.14030)."""
from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layers import check_heads, merge_partitions, pad_grid, partition
from .registry import register_attention


def roll_grid(x: Tensor, shift: int) -> Tensor:
    """``torch.roll(x, (shift, shift), dims=(1, 2))`` of a ``(B, H, W, C)`` map, by slices: inductor
    (torch 2.14.1) fails to lower the backward of ``torch.roll`` with dynamic sizes (``operator.mod``
    on plain ints: "'int' object has no attribute 'is_nonnegative'")."""
    for dim in (1, 2):
        cut = x.shape[dim] - shift if shift > 0 else -shift
        x = torch.cat((x.narrow(dim, cut, x.shape[dim] - cut), x.narrow(dim, 0, cut)), dim)
    return x


@register_attention('window')
class ShiftedWindowAttention(nn.Module):
    """Swin's (shifted) window softmax attention with relative position bias.

    The ``(H, W)`` grid is zero-padded at the bottom/right to multiples of the
    window size ``w``, cyclically shifted by ``s = w // 2`` if ``shift`` (by
    default in odd blocks of a stage: the SW-MSA of every second block) and
    split into ``w x w`` windows. Per window and head, with ``q, k, v (w^2, d)``::

        Y = softmax(q k^T / sqrt(d) + B + M) v

    ``B[i, j]`` is read from a learnable ``((2w-1)^2, heads)`` table at the
    relative offset of tokens i and j; ``M[i, j] = -100`` (the official value)
    between tokens the shift brought together from different image regions,
    else 0. The result is shifted back and cropped to ``(H, W)``. As in the
    official and mmseg implementations, padded tokens are not masked.

    ``pad_small_map=False`` (mmpretrain's ``SwinTransformer`` default, for classification): a map
    whose shorter side equals ``w`` is not shifted, and one whose shorter side is below ``w`` is
    refused (mmpretrain asserts); ``True`` (mmseg's, mmdet's behaviour) pads and shifts every map.

    Parameters are named as in the official Swin (``qkv``, ``proj``,
    ``relative_position_bias_table``) and, except for the table, as in the
    global attentions, so a Swin checkpoint initialises every stage's
    projections whatever its attention. Windows cover grid tokens only
    (``num_prefix_tokens=0``); ``pos_shape`` is not used.
    """

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool | None = None,
                 qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 pos_shape: Sequence[int] | None = None, num_prefix_tokens: int = 0, block_index: int = 0,
                 pad_small_map: bool = True) -> None:
        super().__init__()
        check_heads(dim, num_heads)
        shift = block_index % 2 == 1 if shift is None else shift
        if window_size < 1 or (shift and window_size < 2):
            raise ValueError(f'window_size={window_size} must be >= 1 (>= 2 for shifted windows)')
        if not 0 <= attn_drop < 1:
            raise ValueError(f'attn_drop={attn_drop} must be in [0, 1)')
        if num_prefix_tokens:
            raise ValueError(f'num_prefix_tokens={num_prefix_tokens}: window attention covers grid tokens only '
                             '(e.g. LiSAViT needs with_cls_token=False)')
        self.num_heads, self.window_size = num_heads, window_size
        self.shift_size = window_size // 2 if shift else 0
        self.pad_small_map = pad_small_map
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing='ij'))
        offsets = coords.flatten(1)[:, :, None] - coords.flatten(1)[:, None, :] + window_size - 1  # (2, w^2, w^2)
        self.register_buffer('relative_position_index', offsets[0] * (2 * window_size - 1) + offsets[1],
                             persistent=False)

    def reset_parameters(self) -> None:
        """The table from a truncated normal (std 0.02), as Swin initialises it."""
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    @staticmethod
    def _shift_mask(hp: int, wp: int, w: int, s: int, device: torch.device) -> Tensor:
        """``M`` of every window of the padded ``(hp, wp)`` grid, ``(nW, w^2, w^2)``."""
        region = torch.zeros(hp, wp, device=device)
        cuts = (slice(0, -w), slice(-w, -s), slice(-s, None))
        for i, (rows, cols) in enumerate(product(cuts, cuts)):
            region[rows, cols] = i
        region = region.view(hp // w, w, wp // w, w).transpose(1, 2).reshape(-1, w * w)
        return (region[:, None, :] != region[:, :, None]).float() * -100.0

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        b, n, c = x.shape
        h, w = hw_shape
        ws, s = self.window_size, self.shift_size
        if not self.pad_small_map and min(h, w) <= ws:
            if min(h, w) < ws:
                raise ValueError(f'a {h}x{w} map is smaller than window_size={ws}, which pad_small_map=False '
                                 "(mmpretrain's default) refuses as mmpretrain does: pass pad_small_map=True "
                                 'or a smaller window_size')
            s = 0  # mmpretrain (as the official Swin): no shift on a map of the window's size
        x = pad_grid(x, hw_shape, ws)
        hp, wp = x.shape[1:3]
        if s:
            x = roll_grid(x, -s)
        windows = partition(x, ws, ws)                                                         # (B, nW, w^2, C)
        nw = windows.shape[1]
        # Windows are folded into the head axis, (B, nW * heads, w^2, d), because scaled_dot_product_attention
        # (and its ONNX translation) takes 4-D tensors; M then broadcasts over the batch without a copy.
        q, k, v = self.qkv(windows).unflatten(-1, (3, self.num_heads, -1)).permute(3, 0, 1, 4, 2, 5).flatten(2, 3)
        mask = self.relative_position_bias_table[self.relative_position_index].permute(2, 0, 1)  # (heads, w^2, w^2)
        mask = mask.repeat(nw, 1, 1) if not s else (mask + self._shift_mask(hp, wp, ws, s, x.device)[:, None]
                                                    ).flatten(0, 1)
        out = F.scaled_dot_product_attention(                                                  # (B, nW*heads, w^2, d)
            q, k, v, attn_mask=mask.to(q.dtype), dropout_p=self.attn_drop if self.training else 0.0)
        out = self.proj_drop(self.proj(out.unflatten(1, (nw, self.num_heads)).transpose(2, 3).flatten(-2)))
        x = merge_partitions(out, hp, wp, ws, ws)
        if s:
            x = roll_grid(x, s)
        return x[:, :h, :w].reshape(b, n, c)
