"""Token and grid layers shared by the attentions, the backbones and ``analysis/``.

Every attention maps tokens ``x`` of shape ``(B, N, C)`` to ``(B, N, C)``. The last ``H * W``
tokens lie on an ``(H, W)`` grid (row-major); the first ``num_prefix_tokens`` (e.g. a class
token) do not. Here: checks of that layout, heads, windows/regions of the grid, its
resizing (:func:`resize_grid`) and the learnable :class:`PositionalEncoding`. Torch only.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def check_heads(dim: int, num_heads: int) -> int:
    """Return the head width, or raise if ``num_heads`` does not divide ``dim``."""
    if num_heads < 1 or dim % num_heads:
        raise ValueError(f'num_heads={num_heads} must be a positive divisor of dim={dim}')
    return dim // num_heads


def check_tokens(x: Tensor, hw_shape: Sequence[int], num_prefix_tokens: int) -> None:
    """Raise unless ``x`` holds ``num_prefix_tokens + H * W`` tokens."""
    if x.dim() != 3:
        raise ValueError(f'expected tokens of shape (B, N, C), got {tuple(x.shape)}')
    h, w = hw_shape
    if x.shape[1] != num_prefix_tokens + h * w:
        raise ValueError(
            f'N={x.shape[1]} tokens do not match hw_shape=({h}, {w}) '
            f'with {num_prefix_tokens} prefix tokens (expected {num_prefix_tokens + h * w})')


def pad_grid(x: Tensor, hw_shape: Sequence[int], multiple: int) -> Tensor:
    """Grid tokens ``(B, H*W, C)`` (no prefix tokens) as a ``(B, Hp, Wp, C)`` map, zero-padded at the
    bottom/right so that ``Hp`` and ``Wp`` are multiples of ``multiple`` (window and region attentions)."""
    check_tokens(x, hw_shape, 0)
    h, w = hw_shape
    return F.pad(x.view(x.shape[0], h, w, x.shape[-1]), (0, 0, 0, -w % multiple, 0, -h % multiple))


def partition(x: Tensor, rows: int, cols: int) -> Tensor:
    """A ``(B, Hp, Wp, C)`` map as ``(B, Hp/rows * Wp/cols, rows * cols, C)`` blocks of ``rows x cols``
    tokens (windows, regions), blocks and the tokens inside each in row-major order."""
    b, hp, wp, c = x.shape
    return x.view(b, hp // rows, rows, wp // cols, cols, c).transpose(2, 3).reshape(
        b, hp // rows * (wp // cols), rows * cols, c)


def merge_partitions(x: Tensor, hp: int, wp: int, rows: int, cols: int) -> Tensor:
    """The inverse of :func:`partition`: ``(B, nBlocks, rows * cols, C)`` back to the ``(B, Hp, Wp, C)`` map."""
    b, c = x.shape[0], x.shape[-1]
    return x.view(b, hp // rows, wp // cols, rows, cols, c).transpose(2, 3).reshape(b, hp, wp, c)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """``(B, N, h*d) -> (B, h, N, d)``."""
    b, n, c = x.shape
    return x.view(b, n, num_heads, c // num_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, h, N, d) -> (B, N, h*d)``."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


RESIZE_MODES = ('bilinear', 'bicubic')


@functools.lru_cache(maxsize=256)
def interpolation_matrix(size_in: int, size_out: int, mode: str, device: torch.device,
                         dtype: torch.dtype) -> Tensor:
    """``(size_out, size_in)`` matrix ``A`` of 1-D resizing: ``A x`` is ``F.interpolate(x, mode=mode,
    align_corners=False)`` along one axis (half-pixel centres, border replicated).

    Read off ``F.interpolate`` itself by resizing the unit vectors in float64 (the other axis
    of size 1 stays exact). Cached per size, outside inference mode (so that a matrix made
    at test time can still take part in training).
    """
    with torch.inference_mode(False), torch.no_grad():
        units = torch.eye(size_in, dtype=torch.float64).view(1, size_in, size_in, 1)  # channel j: e_j
        matrix = F.interpolate(units, size=(size_out, 1), mode=mode, align_corners=False)[0, :, :, 0].T
        return matrix.to(device, dtype)


def static_sizes(*sizes: int) -> bool:
    """Whether every size is a plain int, not a symbol of a trace with dynamic shapes (where a
    comparison such as ``size == pos_shape`` would pin the traced graph to one size)."""
    return all(type(s) is int for s in sizes)


def resize_grid(grid: Tensor, size: Sequence[int], mode: str) -> Tensor:
    """Resize a ``(h, w, C)`` grid to ``size = (H, W)``: ``F.interpolate(..., mode, align_corners=False)``.

    Bilinear and bicubic resizing are separable and linear, ``out = A_y G A_x^T`` per channel,
    so eagerly the grid goes through two small matmuls with cached matrices of
    :func:`interpolation_matrix` (forward and backward are dense products, no
    channels-first copy). Under tracing (``torch.compile``, ``torch.export``, ONNX) the
    size may be symbolic and ``F.interpolate`` itself is recorded.
    """
    if mode not in RESIZE_MODES:
        raise ValueError(f'mode={mode!r} is not one of {RESIZE_MODES}')
    h, w, c = grid.shape
    out_h, out_w = size
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or not static_sizes(h, w, out_h, out_w):
        chw = grid.permute(2, 0, 1).unsqueeze(0)
        return F.interpolate(chw, size=(out_h, out_w), mode=mode, align_corners=False)[0].permute(1, 2, 0)
    a_y = interpolation_matrix(h, out_h, mode, grid.device, grid.dtype)
    a_x = interpolation_matrix(w, out_w, mode, grid.device, grid.dtype)
    rows = (a_y @ grid.reshape(h, w * c)).view(out_h, w, c)  # along y
    return a_x @ rows                                         # along x: (W, w) @ (H, w, C) -> (H, W, C)


class PositionalEncoding(nn.Module):
    """Learnable positional encoding for ``num_prefix_tokens + H0 * W0`` tokens.

    For another grid ``(H, W)`` the grid part is resized bicubically, the prefix
    part used as it is (:func:`position_table_at`).
    """

    def __init__(self, dim: int, pos_shape: Sequence[int], num_prefix_tokens: int = 0) -> None:
        super().__init__()
        if len(pos_shape) != 2 or min(pos_shape) < 1:
            raise ValueError(f'pos_shape must be two positive ints (H, W), got {pos_shape}')
        self.pos_shape = tuple(int(s) for s in pos_shape)
        self.num_prefix_tokens = num_prefix_tokens
        self.weight = nn.Parameter(torch.zeros(1, num_prefix_tokens + math.prod(self.pos_shape), dim))

    def forward(self, hw_shape: Sequence[int]) -> Tensor:
        return position_table_at(self.weight, self.pos_shape, hw_shape, self.num_prefix_tokens)


def position_table_at(table: Tensor, pos_shape: Sequence[int], hw_shape: Sequence[int],
                      num_prefix_tokens: int = 0) -> Tensor:
    """A ``(1, p + H0 * W0, C)`` position table of the grid ``pos_shape = (H0, W0)`` for the grid
    ``hw_shape = (H, W)``: its grid part resized bicubically (:func:`resize_grid`), its ``p`` prefix
    rows as they are; ``table`` itself where the grids are equal."""
    hw_shape = tuple(hw_shape)
    if static_sizes(*hw_shape) and hw_shape == tuple(pos_shape):
        return table
    p = num_prefix_tokens
    grid = resize_grid(table[0, p:].view(*pos_shape, -1), hw_shape, 'bicubic')
    grid = grid.reshape(1, -1, grid.shape[-1])
    return torch.cat([table[:, :p], grid], dim=1) if p else grid
