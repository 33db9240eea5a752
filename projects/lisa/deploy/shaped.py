"""Export-shaped formulations of LiSA's operators: the same values as their references, as graphs that
onnxruntime runs fast (issue #40).

Under ``torch.export`` the operators trace their plain-tensor references
(:mod:`projects.lisa.models.attention.ops.backend`), written for reading. Their graphs are slow in
onnxruntime, whose CPU kernels run one op at a time over whole tensors, for three reasons (an
onnxruntime per-node profile of S-FPN LiSA-PVT-T at 512 x 512, ``tools/benchmark_deploy.py``):

* the 3 x 3 neighbourhood attention stacks nine shifted copies of the padded key and value grids,
  ``(B, h, H, W, 9, d)`` each, multiplied and summed by broadcasting elementwise ops: nine times the
  memory traffic of the grids, in ~100 Slice, Unsqueeze, Pad and Concat nodes per layer;
* the positional encodings are resized by ``F.interpolate`` (under tracing the sizes are symbolic):
  onnxruntime's bicubic ``Resize`` is a slow scalar loop, where eager PyTorch multiplies by two
  interpolation matrices;

Here each is written as a few large ops, the contractions as ``MatMul``:

* :func:`neighbourhood_attention_tiled`: the grid cut into ``t x t`` tiles, each tile's queries
  against the ``(t + 2r)^2`` keys around it in one batched ``MatMul``, the keys outside a query's
  window masked before the softmax: a gather of the key and value tiles (1 + 2r/t)^2 times their
  size instead of ``k^2`` shifted copies;
* :func:`resize_grid_matmul`: the resizing as ``A_y G A_x^T`` with the interpolation matrices built in
  the graph from the (symbolic) output size.

:func:`export_formulations` swaps them in while the export traces (:func:`.onnx.export`). Each is
held
to its reference by ``tests/test_deploy_shaped.py`` in float64 and float32 at two sizes.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

#: Side of the query tiles of :func:`neighbourhood_attention_tiled`: each tile of 4 x 4 queries reads
#: 6 x 6 keys (a 3 x 3 window), 2.25 times the key and value grids and 36 logits per query.
TILE = 4


def neighbourhood_attention_tiled(
    q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3,
    out_scale: Tensor | None = None, num_prefix_tokens: int = 0, tile: int = TILE
) -> Tensor:
    """:func:`~projects.lisa.models.attention.ops.neighbourhood_attention_reference`, tiled.

    With ``r = kernel_size // 2`` and ``s = t + 2r``: the grid, zero-padded to ``(Hp, Wp)``, multiples
    of ``t``, is cut into ``n = Hp Wp / t^2`` tiles; tile ``(a, b)`` holds the queries
    ``(a t + i, b t + j)``, ``0 <= i, j < t``, and reads the ``s x s`` keys and values
    ``(a t + i' - r, b t + j' - r)``, ``0 <= i', j' < s`` (one ``Gather`` of the padded grid). Then

        L = scale Q_tile K_tile^T                     (B, h, n, t^2, s^2), one MatMul
        L[q, k] = -inf  unless  0 <= i' - i <= 2r, 0 <= j' - j <= 2r  and key (y, x) inside the image
        Y_tile = softmax(L) V_tile                    (B, h, n, t^2, dv), one MatMul

    which is the reference's softmax over each query's in-image window (the masked keys weigh
    exactly 0). Queries in the padding are dropped. Shapes as the reference's.
    """
    p, (h, w), r = num_prefix_tokens, hw_shape, kernel_size // 2
    t, s = tile, tile + 2 * r
    b, heads, d, dv = q.shape[0], q.shape[1], q.shape[-1], v.shape[-1]
    ny, nx = (h + t - 1) // t, (w + t - 1) // t
    hp, wp = ny * t, nx * t
    device = q.device
    # queries: (B, h, ny, t, nx, t, d) -> (B, h, ny nx, t^2, d)
    grid = F.pad(q[:, :, p:].unflatten(2, (h, w)), (0, 0, 0, wp - w, 0, hp - h))
    q_tiles = grid.reshape(b, heads, ny, t, nx, t, d).transpose(3, 4).reshape(b, heads, ny * nx, t * t, d)
    # key rows/columns of each tile in the grid padded by r (then to Hp + 2r, Wp + 2r): (ny, 1, s, 1), (1, nx, 1, s)
    rows = torch.arange(ny, device=device).view(ny, 1, 1, 1) * t + torch.arange(s, device=device).view(1, 1, s, 1)
    cols = torch.arange(nx, device=device).view(1, nx, 1, 1) * t + torch.arange(s, device=device).view(1, 1, 1, s)
    index = (rows * (wp + 2 * r) + cols).flatten()                          # (ny nx s^2)

    def halo(x: Tensor) -> Tensor:  # (B, h, ny nx, s^2, dx): each tile's keys or values
        padded = F.pad(x[:, :, p:].unflatten(2, (h, w)), (0, 0, r, wp - w + r, r, hp - h + r)).flatten(2, 3)
        return padded.index_select(2, index).view(b, heads, ny * nx, s * s, x.shape[-1])

    inside = ((rows >= r) & (rows < h + r) & (cols >= r) & (cols < w + r)).reshape(ny * nx, 1, s * s)
    i, j = torch.arange(t, device=device).view(t, 1), torch.arange(s, device=device).view(1, s)
    near = (j >= i) & (j <= i + 2 * r)                                      # (t, s): |offset| <= r along one axis
    window = (near.view(t, 1, s, 1) & near.view(1, t, 1, s)).reshape(t * t, s * s)
    logits = (q_tiles @ halo(k).transpose(-2, -1)) * scale
    attn = logits.masked_fill(~(inside & window), -math.inf).softmax(-1)
    out = (attn @ halo(v)).view(b, heads, ny, nx, t, t, dv).transpose(3, 4).reshape(b, heads, hp, wp, dv)
    out = out[:, :, :h, :w].flatten(2, 3)
    out = torch.cat([v[:, :, :p], out], dim=2) if p else out
    return out if out_scale is None else out * out_scale


def cubic_weights(t: Tensor, a: float = -0.75) -> list[Tensor]:
    """The weights of the four taps ``floor(x) - 1 .. floor(x) + 2`` of bicubic convolution at fractional
    offset ``t`` (Keys' kernel with ``a = -0.75``, as ``F.interpolate(mode='bicubic')``)."""
    def near(x: Tensor) -> Tensor:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: Tensor) -> Tensor:   # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def interpolation_matrix(size_in: int, size_out, mode: str, like: Tensor) -> Tensor:
    """``(size_out, size_in)`` matrix of 1-D ``F.interpolate(mode=mode, align_corners=False)`` (half-pixel
    centres, taps clamped to the border), built from ``arange(size_out)`` so that ``size_out`` may be
    symbolic (:func:`projects.lisa.models.attention.layers.interpolation_matrix` reads it off
    ``F.interpolate`` at a fixed size). ``mode``: ``'bilinear'`` or ``'bicubic'``."""
    dtype = torch.promote_types(like.dtype, torch.float32)
    src = (torch.arange(size_out, device=like.device, dtype=dtype) + 0.5) * (size_in / size_out) - 0.5
    if mode == 'bilinear':
        src = src.clamp_min(0)
        taps, weights = 0, [1 - (src - src.floor()), src - src.floor()]
    elif mode == 'bicubic':
        taps, weights = -1, cubic_weights(src - src.floor())
    else:
        raise ValueError(f'mode={mode!r} is not bilinear or bicubic')
    first = src.floor().long() + taps
    columns = torch.arange(size_in, device=like.device)
    matrix = sum(wt[:, None] * ((first + i).clamp(0, size_in - 1)[:, None] == columns).to(dtype)
                 for i, wt in enumerate(weights))
    return matrix.to(like.dtype)


def resize_grid_matmul(grid: Tensor, size: Sequence[int], mode: str) -> Tensor:
    """:func:`projects.lisa.models.attention.layers.resize_grid` as two matrix products
    ``A_y G A_x^T`` (:func:`interpolation_matrix`), with ``size`` symbolic or not."""
    h, w, c = grid.shape
    out_h, out_w = size
    rows = (interpolation_matrix(h, out_h, mode, grid) @ grid.reshape(h, w * c)).view(out_h, w, c)
    return interpolation_matrix(w, out_w, mode, grid) @ rows


@contextlib.contextmanager
def export_formulations() -> Iterator[None]:
    """Trace the formulations of this module in place of the references, for the duration of the block:
    the neighbourhood attention's ``'reference'`` entry (the backend that ``torch.export`` runs) and the
    grid resizing of the positional encodings and position tables."""
    from projects.lisa.models.attention import layers
    from projects.lisa.models.attention.ops import neighbourhood
    from projects.lisa.models.backbones import base

    swaps = [(neighbourhood.IMPLEMENTATIONS, 'reference', neighbourhood_attention_tiled)]
    swaps += [(vars(module), 'resize_grid', resize_grid_matmul) for module in (layers, base)]
    saved = [(table, name, table[name]) for table, name, _ in swaps]
    try:
        for table, name, new in swaps:
            table[name] = new
        yield
    finally:
        for table, name, old in saved:
            table[name] = old
