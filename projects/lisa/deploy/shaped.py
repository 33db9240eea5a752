"""Export-shaped formulations of LiSA's operators: the same values as their references, as graphs that
onnxruntime runs fast.

Under ``torch.export`` the operators trace their plain-tensor references
(:mod:`projects.lisa.models.attention.ops.backend`), written for reading. onnxruntime's CPU kernels run one
op at a time over whole tensors, so the time of such a graph is its memory traffic; a per-node profile of
the exported S-FPN LiSA-PVT-T at 512 x 512 (``SessionOptions.enable_profiling``, docs/deploy.md) put most of
it in:

* the 3 x 3 neighbourhood attention, which stacks nine shifted copies of the padded key and value grids,
  ``(B, h, H, W, 9, d)`` each, multiplied and summed by broadcasting elementwise ops (nine times the
  traffic of the grids, ~100 Slice, Unsqueeze, Pad and Concat nodes per layer);
* the positional encodings' resizing: under tracing the sizes are symbolic and ``F.interpolate`` is
  recorded, and onnxruntime's bicubic ``Resize`` is a slow scalar loop (eager PyTorch multiplies by two
  interpolation matrices instead);
* the walk's mean over the tokens (``ReduceMean`` over a non-last axis) and its token-wise rescaling of ``K``;
* the focusing function's norm of ``u^p``, whose squares of ReLU-zeroed entries are subnormal floats.

Here each is written as a few large ops, the contractions as ``MatMul``:

* :func:`neighbourhood_attention_tiled`: the grid cut into ``t x t`` tiles, each tile's queries against
  the ``(t + 2r)^2`` keys around it in one batched ``MatMul``, the keys outside a query's window masked
  before the softmax: a ``Gather`` of the key and value tiles, ``(1 + 2r/t)^2`` times the grids, instead
  of ``k^2`` shifted copies (no padding, no transposes: the query tiles and the output are gathers too);
* :func:`random_walk_shaped`: the mean as a ``MatMul``, ``K``'s scale folded into the ``d x d`` products;
* :func:`kernel_features_shaped`: FLatten's focusing without subnormal squares in its norm (:func:`focus_shaped`);
* :func:`linear_attention_shaped`: FLatten's linear attention with its token sums as ``MatMul``;
* :func:`resize_grid_matmul`: the resizing as ``A_y G A_x^T``, the interpolation matrices built in the graph
  from the (symbolic) output size;
* :func:`gelu_fusable`: every ``nn.GELU`` in the node order that onnxruntime fuses into one kernel.

:func:`export_formulations` swaps them in while :func:`.onnx.export` traces. Each is held to its
reference by ``tests/test_deploy_shaped.py`` in float64 and float32 at two sizes or more.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Side of the query tiles of :func:`neighbourhood_attention_tiled`: each tile of 4 x 4 queries reads
#: 6 x 6 keys (a 3 x 3 window), 2.25 times the key and value grids and 36 logits per query.
TILE = 4
#: Lower bound of the shifted logits of :func:`neighbourhood_attention_tiled` before ``exp``: ``e^-80`` is a
#: normal float32 (subnormal results make onnxruntime's ``Exp`` slow).
EXP_FLOOR = 80.0


def neighbourhood_attention_tiled(
    q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3,
    out_scale: Tensor | None = None, num_prefix_tokens: int = 0, tile: int = TILE
) -> Tensor:
    """:func:`~projects.lisa.models.attention.ops.neighbourhood_attention_reference`, tiled.

    With ``r = kernel_size // 2`` and ``s = t + 2r``: the grid is cut into ``n = ceil(H/t) ceil(W/t)`` tiles;
    tile ``(a, b)`` holds the queries ``(a t + i, b t + j)``, ``0 <= i, j < t``, and reads the ``s x s`` keys
    and values ``(a t + i' - r, b t + j' - r)``, ``0 <= i', j' < s``: one ``Gather`` each of the query, key
    and value tokens, positions off the grid clamped to its border (their queries are dropped, their keys
    masked). Then

        L = scale Q_tile K_tile^T                     (B, h, n, t^2, s^2), one MatMul
        L[q, k] = -inf  unless  0 <= i' - i <= 2r, 0 <= j' - j <= 2r  and key (y, x) inside the image
        E = exp(max(L - max_k L, -80)),   Y_tile = (E / sum_k E) V_tile   (one MatMul)

    which is the reference's softmax over each query's in-image window: the floor -80 (``EXP_FLOOR``)
    only raises the weights below ``e^-80`` of the largest, the masked keys' among them, to that, a
    relative change under ``(t + 2r)^2 e^-80 ~ 1e-33`` that neither float32 nor float64 rounding sees.
    onnxruntime's ``Softmax`` over rows with masked (-inf) entries is ~4 times slower: its exponentials
    underflow through subnormal floats. A last ``Gather`` puts the tokens back in order. Shapes as the
    reference's.
    """
    p, (h, w), r = num_prefix_tokens, hw_shape, kernel_size // 2
    t, s = tile, tile + 2 * r
    b, heads = q.shape[:2]
    ny, nx = (h + t - 1) // t, (w + t - 1) // t
    device = q.device

    def tile_index(side: int, shift: int) -> tuple[Tensor, Tensor]:  # rows (ny, 1, side, 1), columns (1, nx, 1, side)
        rows = torch.arange(ny, device=device).view(ny, 1, 1, 1) * t + torch.arange(side, device=device).view(
            1, 1, side, 1) - shift
        cols = torch.arange(nx, device=device).view(1, nx, 1, 1) * t + torch.arange(side, device=device).view(
            1, 1, 1, side) - shift
        return rows, cols

    def gather(x: Tensor, rows: Tensor, cols: Tensor) -> Tensor:  # (B, h, ny nx, side^2, dx); clamped to the grid
        index = (rows.clamp(0, h - 1) * w + cols.clamp(0, w - 1)).flatten()
        return x[:, :, p:].index_select(2, index).view(b, heads, ny * nx, -1, x.shape[-1])

    q_rows, q_cols = tile_index(t, 0)
    k_rows, k_cols = tile_index(s, r)
    inside = ((k_rows >= 0) & (k_rows < h) & (k_cols >= 0) & (k_cols < w)).reshape(ny * nx, 1, s * s)
    i, j = torch.arange(t, device=device).view(t, 1), torch.arange(s, device=device).view(1, s)
    near = (j >= i) & (j <= i + 2 * r)                                      # (t, s): |offset| <= r along one axis
    window = (near.view(t, 1, s, 1) & near.view(1, t, 1, s)).reshape(t * t, s * s)
    bias = torch.zeros((), dtype=q.dtype, device=device).masked_fill(~(inside & window), -math.inf)
    logits = (gather(q, q_rows, q_cols) @ gather(k, k_rows, k_cols).transpose(-2, -1)) * scale + bias
    weights = (logits - logits.amax(dim=-1, keepdim=True)).clamp_min(-EXP_FLOOR).exp()
    out = (weights / weights.sum(dim=-1, keepdim=True)) @ gather(v, k_rows, k_cols)  # (B, h, ny nx, t^2, dv)
    # token (y, x) sits in tile (y // t, x // t) at (y % t, x % t)
    ys, xs = torch.arange(h, device=device).view(h, 1), torch.arange(w, device=device).view(1, w)
    index = (((ys // t) * nx + xs // t) * (t * t) + (ys % t) * t + xs % t).flatten()
    out = out.flatten(2, 3).index_select(2, index)
    out = torch.cat([v[:, :, :p], out], dim=2) if p else out
    return out if out_scale is None else out * out_scale


def random_walk_shaped(q: Tensor, k: Tensor, v: Tensor, weights: Tensor, eps: float) -> Tensor:
    """:func:`~projects.lisa.models.attention.ops.random_walk_reference` with one pass over the tokens per
    product: the same ``Y = w_0 V + sum_{t>=1} w_t Q~ M_t``, ``M_1 = K_bar^T V``, ``M_(t+1) = (K_bar^T Q~) M_t``.

    The reference's token-wise steps on ``K`` fold into ``d x d`` ones: with ``mk = max K`` and
    ``K_bar = K / (mk sqrt(n))``, ``K_bar^T X = (K^T X) / (mk sqrt(n))`` and ``mean(K / mk) = (1/n 1^T K) / mk``
    (a ``MatMul``: onnxruntime's ReduceMean over the token axis is slow). ``Q~ = q' / ((q'.mu + eps) sqrt(n))``
    with ``q' = q / max(q_i)`` as in the reference. Weights the same for every token fold into one
    ``d x dv`` matrix."""
    n = k.shape[-2]
    q = q / q.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    mk = k.amax(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(k.dtype).tiny)     # (B, h, 1, 1)
    mu = (torch.ones_like(k[..., :1, :1]).expand(*k.shape[:-2], 1, n) @ k) / (mk * n)  # mean(K / mk), (B, h, 1, d)
    q_hat = q / ((q @ mu.transpose(-2, -1) + eps) * n ** 0.5)
    kt = k.transpose(-2, -1)
    a, m = (kt @ q_hat) / (mk * n ** 0.5), (kt @ v) / (mk * n ** 0.5)
    if weights.shape[-1] == 1:
        return weights * v
    if weights.dim() < 2 or weights.shape[-2] == 1:  # the same weights for every token
        folded = weights[..., 1:2] * m
        for t in range(2, weights.shape[-1]):
            m = a @ m
            folded = folded + weights[..., t:t + 1] * m
        return weights[..., :1] * v + q_hat @ folded
    out = weights[..., :1] * v
    for t in range(1, weights.shape[-1]):
        out = out + weights[..., t:t + 1] * (q_hat @ m)
        m = a @ m
    return out


def linear_attention_shaped(q: Tensor, k: Tensor, v: Tensor, eps: float) -> Tensor:
    """:func:`projects.lisa.models.attention.linear.linear_attention` (FLatten's mix),
    ``Y_i = q_i (K^T V / n) / (q_i . mean_j k_j + eps)``, its two token sums as ``MatMul`` (the mean too:
    onnxruntime's ReduceMean over the token axis is slow) with the ``1/n`` on their ``d x dv`` results
    instead of two passes over ``K`` and ``V``."""
    n = k.shape[-2]
    kv = (k.transpose(-2, -1) @ v) / n
    mean = (torch.ones_like(k[..., :1, :1]).expand(*k.shape[:-2], 1, n) @ k) / n             # (B, h, 1, d)
    return (q @ kv) / (q @ mean.transpose(-2, -1) + eps)


#: Floor of ``u^p`` inside its norm in :func:`focus_shaped`: its square, 1e-36, is a normal float32.
NORM_FLOOR = 1e-18


def focus_shaped(x: Tensor, p: float) -> Tensor:
    """:func:`~projects.lisa.models.attention.ops.features.focus`, ``f_p(x) = max(x) ||u|| u^p / ||u^p||`` for
    ``u = x / max(x)``, with ``||u^p||`` taken over ``max(u^p, 1e-18)``.

    ``u^p`` of the ReLU-zeroed entries (``u`` ~ 1e-7, ``u^3`` ~ 1e-21) squares to subnormal floats, on which
    onnxruntime's ``ReduceL2`` runs ~20 times slower (a microcode assist per element). The floor changes
    ``||u^p||^2 >= 1`` (the largest entry of ``u`` is 1) by at most ``d 1e-36``: no float32 or float64
    rounding sees it; ``u^p`` itself is left as it is."""
    m = x.amax(dim=-1, keepdim=True)
    u = x / m
    up = u.pow(p)
    return up * (m * u.norm(dim=-1, keepdim=True) / up.clamp_min(NORM_FLOOR).norm(dim=-1, keepdim=True))


def kernel_features_shaped(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int,
                           p: float) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`~projects.lisa.models.attention.ops.kernel_features_reference` (ReLU, focusing) with
    :func:`focus_shaped`."""
    q, k, v = qkv.chunk(3, dim=-1)
    if pos is not None:
        k = k + pos
    q, k = focus_shaped((F.relu(q) + 1e-6) / s, p), focus_shaped((F.relu(k) + 1e-6) / s, p)
    if heads == 1:  # a view: onnxruntime would copy for the transpose
        return q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    return tuple(t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in (q, k, v))  # (B, N, h d) -> (B, h, N, d)


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
    dtype = torch.float64  # the coordinates and weights as eager's matrices (read off F.interpolate in float64)
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


def gelu_fusable(module: nn.GELU, x: Tensor) -> Tensor:
    """``nn.GELU``: exact (erf) GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``, the node order that onnxruntime
    fuses into one ``Gelu`` kernel when it loads the file. ``F.gelu`` exports as ``x * (0.5 * (1 + erf))``,
    which stays five elementwise passes: twice the time (3.0 vs 1.55 ms for a Gemm and GELU of
    16384 x 64 tokens, one thread). The tanh approximation is left to ``F.gelu``."""
    if module.approximate != 'none':
        return F.gelu(x, approximate=module.approximate)
    return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))


@contextlib.contextmanager
def export_formulations() -> Iterator[None]:
    """Trace the formulations of this module in place of the references, for the duration of the block:
    the ``'reference'`` entries (the backend that ``torch.export`` runs) of the neighbourhood attention, the
    walk and the kernel features, FLatten's linear attention and the grid resizing of the positional encodings
    and position tables (the module attributes that their callers look up)."""
    from projects.lisa.models.attention import layers, linear
    from projects.lisa.models.attention.ops import features, neighbourhood, walk
    from projects.lisa.models.backbones import grid

    swaps = [(neighbourhood.IMPLEMENTATIONS, 'reference', neighbourhood_attention_tiled),
             (walk.IMPLEMENTATIONS, 'reference', random_walk_shaped),
             (features.IMPLEMENTATIONS, 'reference', kernel_features_shaped)]
    swaps.append((vars(linear), 'linear_attention', linear_attention_shaped))
    swaps += [(vars(module), 'resize_grid', resize_grid_matmul) for module in (layers, grid)]
    saved = [(table, name, table[name]) for table, name, _ in swaps]
    gelu = nn.GELU.forward
    try:
        for table, name, new in swaps:
            table[name] = new
        nn.GELU.forward = gelu_fusable
        yield
    finally:
        nn.GELU.forward = gelu
        for table, name, old in saved:
            table[name] = old
