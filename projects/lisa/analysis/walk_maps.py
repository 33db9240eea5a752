"""What a query token reads: the rows of LiSA's attention operators (paper Fig. 4).

For fixed features ``q, k`` every branch of a kernel attention is a linear map
of the values, ``Y = P V``. Feeding the identity ``V = I_n`` through the
attention's own code path therefore returns ``P`` itself, exactly (up to
rounding), without a separate re-implementation:

* ``S^k`` -- :func:`~..models.attention.ops.random_walk` with the one-hot
  step weights ``e_k``;
* ``P^(T)`` -- the same function with the geometric weights of Eq. 4;
* ``global`` -- the module's own walk (its T, its adaptive weights of Eq. 10);
* ``local`` -- its 3x3 neighbourhood branch;
* ``fused`` -- its ``mix``: ``alpha global + (1 - alpha) local`` for LiSA,
  ``S`` for plain linear attention and FLatten.

The depthwise convolution the kernel attentions add to ``P V`` is a fixed
5x5 filter of ``V``, the same for every query, and is not part of these maps.
``P`` is ``n x n`` per head, so the maps are for grids where that fits
(:data:`MAX_TOKENS`). Torch only.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..models.attention import KernelAttention, LiSAAttention
from ..models.attention.ops import geometric_weights, random_walk

MAX_TOKENS = 4096


def identity_values(q: Tensor) -> Tensor:
    """``I_n`` as values ``(B, h, n, n)`` for features ``q (B, h, n, d)``."""
    b, h, n, _ = q.shape
    return torch.eye(n, dtype=q.dtype, device=q.device).expand(b, h, n, n)


def walk_matrix(q: Tensor, k: Tensor, weights: Sequence[float] | Tensor, eps: float) -> Tensor:
    """``sum_j weights[j] S^j`` as ``(B, h, n, n)``, through :func:`random_walk`."""
    weights = torch.as_tensor(weights, dtype=q.dtype, device=q.device)
    return random_walk(q, k, identity_values(q), weights, eps)


def attention_matrices(attn: KernelAttention, x: Tensor, hw_shape: Sequence[int],
                       powers: Sequence[int] = (1, 2, 4, 6), steps: Sequence[int] = (1, 3, 5, 7),
                       beta: float | None = None) -> dict[str, Tensor]:
    """The operators of ``attn`` on tokens ``x (B, N, C)``, each ``(B, h, N, N)``.

    Keys: ``'S^k'`` for each power k, ``'P^(T)'`` (geometric weights with
    ``beta``, default the module's, else 0.5) for each T, and the module's own
    ``'fused'`` map; for LiSA also ``'global'`` and ``'local'`` when it has
    those branches. Row ``i`` of a map is what token ``i`` reads from every token.
    """
    if not isinstance(attn, KernelAttention):
        raise TypeError(f'{type(attn).__name__} is not a kernel attention (linear, flatten, lisa); '
                        'softmax attention has no walk to draw')
    n = x.shape[1]
    if n > MAX_TOKENS:
        raise ValueError(f'N={n} tokens: the n x n maps are limited to MAX_TOKENS={MAX_TOKENS}; '
                         'use a smaller input or a later stage')
    if any(p < 0 for p in powers) or any(t < 1 for t in steps):
        raise ValueError(f'powers={tuple(powers)} must be >= 0 and steps={tuple(steps)} >= 1')
    beta = beta if beta is not None else getattr(attn, 'beta', 0.5)
    with torch.no_grad():
        q, k, _ = attn.features(x, hw_shape)
        eye = identity_values(q)
        maps = {f'S^{p}': walk_matrix(q, k, [0.0] * p + [1.0], attn.eps) for p in powers}
        maps.update({f'P^({t})': walk_matrix(q, k, geometric_weights(beta, t), attn.eps) for t in steps})
        if isinstance(attn, LiSAAttention):
            if attn.use_global:
                maps['global'] = attn.global_branch(q, k, eye)
            if attn.use_local:
                maps['local'] = attn.local_branch(q, k, eye, hw_shape)
        maps['fused'] = attn.mix(q, k, eye, hw_shape)
    return maps


def query_row(matrix: Tensor, query: int, head: int | None = None) -> Tensor:
    """Row ``query`` of a ``(1, h, N, N)`` map: of one head, or the mean over heads. ``(N,)``."""
    if matrix.shape[0] != 1:
        raise ValueError(f'expected a batch of one image, got {matrix.shape[0]}')
    n = matrix.shape[-1]
    if not 0 <= query < n:
        raise ValueError(f'query={query} is not a token index in [0, {n})')
    rows = matrix[0, :, query]
    if head is None:
        return rows.mean(0)
    if not 0 <= head < rows.shape[0]:
        raise ValueError(f'head={head} is not in [0, {rows.shape[0]})')
    return rows[head]


def query_token(point_xy: Sequence[float], input_hw: Sequence[int], hw_shape: Sequence[int],
                num_prefix_tokens: int = 0) -> int:
    """Index of the grid token whose cell holds pixel ``(x, y)`` of an ``input_hw`` input."""
    (x, y), (ih, iw), (h, w) = point_xy, input_hw, hw_shape
    if not (0 <= x < iw and 0 <= y < ih):
        raise ValueError(f'query pixel (x={x}, y={y}) is outside the {iw}x{ih} input')
    return num_prefix_tokens + int(y * h // ih) * w + int(x * w // iw)


def split_row(row: Tensor, hw_shape: Sequence[int], num_prefix_tokens: int = 0) -> tuple[Tensor, Tensor]:
    """``(prefix weights (p,), grid weights (H, W))`` of a row over ``p + H*W`` tokens."""
    return row[:num_prefix_tokens], row[num_prefix_tokens:].reshape(*hw_shape)
