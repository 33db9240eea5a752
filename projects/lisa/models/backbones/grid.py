"""Tokens on a grid: ``(B, H*W, C)`` sequences as ``(B, C, H, W)`` maps, and position tables resized."""
from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from ..attention.layers import resize_grid, static_sizes


def nlc_to_nchw(x: Tensor, hw_shape: Sequence[int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` as a contiguous ``(B, C, H, W)`` map. Not a channels-last view: kernels
    that read raw memory as NCHW (mmcv's RoIAlign, open-mmlab/mmcv#2203) would take it for one."""
    b, _, c = x.shape
    return x.transpose(1, 2).reshape(b, c, *hw_shape).contiguous()


def resize_grid_tokens(tokens: Tensor, src_hw: Sequence[int], dst_hw: Sequence[int], mode: str) -> Tensor:
    """Resize ``(1, h*w, C)`` tokens on an ``(h, w)`` grid to ``(1, H*W, C)`` (:func:`resize_grid`)."""
    if static_sizes(*dst_hw) and tuple(src_hw) == tuple(dst_hw):
        return tokens
    grid = resize_grid(tokens.reshape(*src_hw, tokens.shape[-1]), tuple(dst_hw), mode)
    return grid.reshape(1, -1, grid.shape[-1])
