"""LiSA's local branch: softmax attention over each token's 3x3 grid neighbourhood."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


def _windows(h: int, w: int, kernel_size: int) -> list[tuple[slice, slice, slice, slice]]:
    """For each window offset ``(dy, dx)`` (row-major), the query rows/columns whose
    neighbour at that offset lies inside the image, and those neighbours' rows/columns."""
    r = kernel_size // 2
    out = []
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            ys, xs = slice(max(0, -dy), h - max(0, dy)), slice(max(0, -dx), w - max(0, dx))
            out.append((ys, xs, slice(ys.start + dy, ys.stop + dy), slice(xs.start + dx, xs.stop + dx)))
    return out


def neighbourhood_attention(
    q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3
) -> Tensor:
    """``Y_i = sum_{j in N(i)} softmax_j(scale q_i.k_j) v_j`` over grid tokens.

    ``N(i)`` is the ``kernel_size x kernel_size`` window centred on token i,
    clipped at the image border (out-of-image neighbours are masked, not
    zero-padded), so each row of weights sums to one over the real neighbours.
    Shapes: ``q, k (B, h, H*W, d)``, ``v (B, h, H*W, dv)`` -> ``(B, h, H*W, dv)``.

    Each window offset is one pass over the overlapping parts of two grids
    (no padded or unfolded copies). Backward keeps q, k, v and the
    ``(k*k, H, W)`` weights. The branch runs in float32 at least (exp of
    large similarities under fp16/bf16); the output has ``v``'s dtype.
    """
    dtype = torch.promote_types(torch.promote_types(q.dtype, v.dtype), torch.float32)
    with torch.autocast(q.device.type, enabled=False):
        out = _NeighbourhoodAttention.apply(
            q.to(dtype), k.to(dtype), v.to(dtype), tuple(hw_shape), scale, kernel_size)
    return out.to(v.dtype)


class _NeighbourhoodAttention(torch.autograd.Function):
    """Forward and backward of :func:`neighbourhood_attention`, one pass per window offset.

    With ``a_o(i) = softmax_o(scale q_i.k_(i+o))`` and upstream gradient ``G``:

        dv_(i+o) += a_o(i) G_i,   g_o(i) = a_o(i) (G_i.v_(i+o) - sum_o' a_o'(i) G_i.v_(i+o')),
        dq_i += scale g_o(i) k_(i+o),   dk_(i+o) += scale g_o(i) q_i.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, hw_shape: tuple[int, int], scale: float,
                kernel_size: int) -> Tensor:
        b, nh, n, d = q.shape
        h, w = hw_shape
        windows = _windows(h, w, kernel_size)
        qg, kg, vg = q.view(b, nh, h, w, d), k.view(b, nh, h, w, d), v.view(b, nh, h, w, -1)
        logits = q.new_full((b, nh, len(windows), h, w), float('-inf'))
        for o, (ys, xs, ny, nx) in enumerate(windows):
            logits[:, :, o, ys, xs] = torch.linalg.vecdot(qg[:, :, ys, xs], kg[:, :, ny, nx]) * scale
        attn = logits.softmax(dim=2)
        centre = len(windows) // 2  # offset (0, 0): covers the whole grid
        out = attn[:, :, centre, ..., None] * vg
        for o, (ys, xs, ny, nx) in enumerate(windows):
            if o != centre:
                out[:, :, ys, xs].addcmul_(attn[:, :, o, ys, xs, None], vg[:, :, ny, nx])
        ctx.save_for_backward(q, k, v, attn)
        ctx.hw_shape, ctx.scale, ctx.kernel_size = hw_shape, scale, kernel_size
        return out.view(b, nh, n, -1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        q, k, v, attn = ctx.saved_tensors
        b, nh, n, d = q.shape
        h, w = ctx.hw_shape
        windows = _windows(h, w, ctx.kernel_size)
        centre = len(windows) // 2
        qg, kg, vg = q.view(b, nh, h, w, d), k.view(b, nh, h, w, d), v.view(b, nh, h, w, -1)
        gg = grad.reshape(b, nh, h, w, -1)
        g = torch.zeros_like(attn)  # G_i . v_(i+o); zero outside the image, where attn = 0
        for o, (ys, xs, ny, nx) in enumerate(windows):
            g[:, :, o, ys, xs] = torch.linalg.vecdot(gg[:, :, ys, xs], vg[:, :, ny, nx])
        g = attn * (g - (attn * g).sum(dim=2, keepdim=True)) * ctx.scale
        d_q = g[:, :, centre, ..., None] * kg
        d_k = g[:, :, centre, ..., None] * qg
        d_v = attn[:, :, centre, ..., None] * gg
        for o, (ys, xs, ny, nx) in enumerate(windows):
            if o != centre:
                d_q[:, :, ys, xs].addcmul_(g[:, :, o, ys, xs, None], kg[:, :, ny, nx])
                d_k[:, :, ny, nx].addcmul_(g[:, :, o, ys, xs, None], qg[:, :, ys, xs])
                d_v[:, :, ny, nx].addcmul_(attn[:, :, o, ys, xs, None], gg[:, :, ys, xs])
        return d_q.view(b, nh, n, d), d_k.view(b, nh, n, d), d_v.view(b, nh, n, -1), None, None, None
