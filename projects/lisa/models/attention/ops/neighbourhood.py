"""LiSA's local branch: softmax attention over each token's 3x3 grid neighbourhood, as one operator."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .backend import choose, extension

# Elements of one operand processed at a time on the CPU by the tensor-operation
# path: the window offsets then reuse it from cache instead of streaming it from
# memory once per offset.
CPU_BLOCK_ELEMENTS = 3 << 17


def neighbourhood_attention(
    q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3,
    out_scale: Tensor | None = None, num_prefix_tokens: int = 0, backend: str | None = None
) -> Tensor:
    """``Y_i = w sum_{j in N(i)} softmax_j(scale q_i.k_j) v_j`` over grid tokens.

    ``N(i)`` is the ``kernel_size x kernel_size`` window centred on token i,
    clipped at the image border (out-of-image neighbours are masked, not
    zero-padded), so each row of weights sums to one over the real neighbours.
    The first ``num_prefix_tokens`` tokens are not on the grid: each attends
    to itself only (``Y_i = w v_i``). Shapes: ``q, k (B, h, p + H*W, d)``,
    ``v (B, h, p + H*W, dv)`` -> ``(B, h, p + H*W, dv)``; ``out_scale``
    (``w``, default 1) broadcasts to ``(B, h, 1, 1)``: a fusion weight folded
    into the attention weights, which costs no pass over the tokens.

    Backends (:mod:`.backend`, the table :data:`IMPLEMENTATIONS`): ``'reference'`` is the definition,
    :func:`neighbourhood_attention_reference`. ``'torch'`` (op ``lisa::neighbourhood``)
    computes each window offset as one tensor operation over the overlapping parts
    of two grids (no padded or unfolded copies), on the CPU in row blocks that stay
    in cache across the offsets. ``'cpu_kernel'`` (op ``lisa::neighbourhood_fused``,
    ``neighbourhood_cpu.cpp``) computes each token's window in one go, forward
    and backward, parallel over grid rows. Both ops have their own backward, keep
    q, k, v and the ``k*k`` weights per token for it and gather each token's
    gradients from its neighbours (no scatter), so the result does not depend on
    the number of threads; they run in float32 at least (exp of large similarities
    under fp16/bf16), the output has ``v``'s dtype.
    """
    attend = choose(IMPLEMENTATIONS, backend, q, k, v, dtype=_compute_dtype(q, v))
    return attend(q, k, v, hw_shape, scale, kernel_size, out_scale, num_prefix_tokens)


def neighbourhood_attention_reference(
    q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3,
    out_scale: Tensor | None = None, num_prefix_tokens: int = 0
) -> Tensor:
    """:func:`neighbourhood_attention` as its definition, differentiated by autograd: the
    ``k*k`` shifted copies of the zero-padded key and value grids, logits of neighbours
    outside the image set to ``-inf``."""
    p, (h, w), r = num_prefix_tokens, hw_shape, kernel_size // 2

    def windows(t: Tensor) -> Tensor:  # (B, nh, H, W, k*k, d): each grid token's neighbours
        grid = F.pad(t[:, :, p:].unflatten(2, (h, w)), (0, 0, r, r, r, r))
        return torch.stack([grid[:, :, y:y + h, x:x + w] for y in range(kernel_size) for x in range(kernel_size)], -2)

    inside = windows(torch.ones_like(q[:1, :1, :, :1]))[..., 0] > 0
    logits = (q[:, :, p:].unflatten(2, (h, w)).unsqueeze(-2) * windows(k)).sum(-1) * scale
    attn = logits.masked_fill(~inside, -math.inf).softmax(-1)
    out = torch.cat([v[:, :, :p], (attn.unsqueeze(-1) * windows(v)).sum(-2).flatten(2, 3)], dim=2)
    return out if out_scale is None else out * out_scale


def _compute_dtype(q: Tensor, v: Tensor) -> torch.dtype:
    """The dtype the custom ops compute in: float32 at least (exp of large similarities under fp16/bf16)."""
    return torch.promote_types(torch.promote_types(q.dtype, v.dtype), torch.float32)


def _custom_op(op: Callable[..., tuple[Tensor, Tensor]]) -> Callable[..., Tensor]:
    """:func:`neighbourhood_attention` by the custom op ``op``, outside autocast in :func:`_compute_dtype`."""

    def attend(q: Tensor, k: Tensor, v: Tensor, hw_shape: Sequence[int], scale: float, kernel_size: int = 3,
               out_scale: Tensor | None = None, num_prefix_tokens: int = 0) -> Tensor:
        dtype = _compute_dtype(q, v)
        with torch.autocast(q.device.type, enabled=False):
            # (B, h, N, d) as it is: the ops return gradients in that shape, which autograd can add
            # the other branches' gradients to in place (not to a view of a reshaped tensor).
            qkv = tuple(t.to(dtype).contiguous() for t in (q, k, v))
            w = torch.ones((), dtype=dtype, device=q.device) if out_scale is None else out_scale
            w = w.to(dtype).expand(*q.shape[:2], 1, 1).flatten().contiguous()
            return op(*qkv, w, *hw_shape, num_prefix_tokens, scale, kernel_size)[0].to(v.dtype)

    return attend


def _prefix_forward(v: Tensor, out_scale: Tensor, out: Tensor, p: int) -> None:
    """The prefix tokens' rows of ``out`` (``(..., p + H*W, dv)``, contiguous): ``Y_i = w v_i``."""
    v, out = v.flatten(0, -3), out.flatten(0, -3)  # (BH, p + H*W, dv), out written through its view
    torch.mul(v[:, :p], out_scale[:, None, None], out=out[:, :p])


def _prefix_backward(grad: Tensor, v: Tensor, out_scale: Tensor, d_q: Tensor, d_k: Tensor, d_v: Tensor,
                     p: int) -> Tensor:
    """The prefix tokens' rows of ``d_q, d_k`` (zero) and ``d_v`` (``w G_i``), all ``(..., p + H*W, .)``
    and contiguous; returns their share of ``d_w``, ``sum_i G_i.v_i`` per batch-head."""
    grad, v, d_q, d_k, d_v = (t.flatten(0, -3) for t in (grad, v, d_q, d_k, d_v))  # written through the views
    d_q[:, :p] = 0
    d_k[:, :p] = 0
    torch.mul(grad[:, :p], out_scale[:, None, None], out=d_v[:, :p])
    return (grad[:, :p] * v[:, :p]).sum((1, 2))


def _fused_forward(q: Tensor, k: Tensor, v: Tensor, out_scale: Tensor, h: int, w: int, num_prefix_tokens: int,
                   scale: float, kernel_size: int) -> tuple[Tensor, Tensor]:
    """:func:`neighbourhood_attention` by the fused CPU kernel on contiguous ``(..., p + H*W, d)``
    tokens: the output (in ``v``'s shape) and the attention weights ``(BH, H, W, k*k)``."""
    p = num_prefix_tokens
    out, attn = extension('neighbourhood').forward(q, k, v, out_scale, p, h, w, scale, kernel_size)
    _prefix_forward(v, out_scale, out, p)
    return out, attn.view(-1, h, w, kernel_size ** 2)


def _fused_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out_scale: Tensor, attn: Tensor, h: int, w: int,
                    num_prefix_tokens: int, scale: float, kernel_size: int) -> tuple[Tensor, ...]:
    """:func:`_tensor_backward` by the fused CPU kernel (gradients in the shapes of ``q, k, v``)."""
    p = num_prefix_tokens
    d_q, d_k, d_v, d_w_rows = extension('neighbourhood').backward(grad, q, k, v, out_scale, attn, p, h, w, scale,
                                                                  kernel_size)
    return d_q, d_k, d_v, d_w_rows.sum(1) + _prefix_backward(grad, v, out_scale, d_q, d_k, d_v, p)


class _Window:
    """Window offset ``(dy, dx)``: query columns ``xs`` whose neighbour columns ``nxs`` are inside."""

    def __init__(self, dy: int, dx: int, h: int, w: int) -> None:
        self.dy = dy
        self.rows = (max(0, -dy), h - max(0, dy))
        self.xs, self.nxs = slice(max(0, -dx), w - max(0, dx)), slice(max(0, dx), w - max(0, -dx))

    def rows_in(self, y0: int, y1: int, of_neighbours: bool = False) -> tuple[slice, slice] | None:
        """Query rows with an in-image neighbour row, and those neighbour rows, where the
        query rows (or, with ``of_neighbours``, the neighbour rows) lie in ``[y0, y1)``."""
        shift = self.dy if of_neighbours else 0
        a0, a1 = max(self.rows[0] + shift, y0) - shift, min(self.rows[1] + shift, y1) - shift
        return (slice(a0, a1), slice(a0 + self.dy, a1 + self.dy)) if a0 < a1 else None


def _grid(t: Tensor, num_prefix_tokens: int, hw_shape: tuple[int, int]) -> Tensor:
    """The grid tokens of ``(BH, p + H*W, d)`` as a ``(BH, H, W, d)`` view."""
    return t[:, num_prefix_tokens:].view(t.shape[0], *hw_shape, t.shape[-1])


def _blocks(t: Tensor) -> Iterator[tuple[slice, int, int]]:
    """``(batch slice, y0, y1)`` blocks of a ``(BH, H, W, d)`` grid (one block off the CPU)."""
    bh, h, w, d = t.shape
    if t.device.type != 'cpu':
        yield slice(None), 0, h
        return
    per_item = h * w * d
    items = max(1, min(bh, CPU_BLOCK_ELEMENTS // per_item))
    rows = max(1, CPU_BLOCK_ELEMENTS // (items * w * d))
    for i in range(0, bh, items):
        for y0 in range(0, h, rows):
            yield slice(i, i + items), y0, min(h, y0 + rows)


def _tensor_forward(q: Tensor, k: Tensor, v: Tensor, out_scale: Tensor, h: int, w: int, num_prefix_tokens: int,
                    scale: float, kernel_size: int) -> tuple[Tensor, Tensor]:
    """:func:`neighbourhood_attention` in tensor operations on ``(..., p + H*W, d)`` tokens: the
    output (in ``v``'s shape) and the attention weights ``(BH, k*k, H, W)``.

    With ``a_o(i) = softmax_o(scale q_i.k_(i+o))``, ``Y_i = w sum_o a_o(i) v_(i+o)``,
    upstream gradient ``G`` and ``p_o(i) = G_i.v_(i+o)``:

        dw = sum_(i,o) a_o(i) p_o(i),   g_o(i) = w a_o(i) (p_o(i) - sum_o' a_o'(i) p_o'(i)),
        dq_i = scale sum_o g_o(i) k_(i+o),  dk_(i+o) += scale g_o(i) q_i,  dv_(i+o) += w a_o(i) G_i.
    """
    p = num_prefix_tokens
    r = kernel_size // 2
    windows = [_Window(dy, dx, h, w) for dy in range(-r, r + 1) for dx in range(-r, r + 1)]
    centre = len(windows) // 2  # offset (0, 0), inside for every token
    out = v.new_empty(v.shape)
    q, k, v, flat_out = (t.flatten(0, -3) for t in (q, k, v, out))  # (BH, p + H*W, d)
    _prefix_forward(v, out_scale, flat_out, p)
    qg, kg, vg, og = (_grid(t, p, (h, w)) for t in (q, k, v, flat_out))
    attn = q.new_full((q.shape[0], len(windows), h, w), float('-inf'))
    for bs, y0, y1 in _blocks(qg):
        for o, win in enumerate(windows):
            if (rows := win.rows_in(y0, y1)) is not None:
                ys, ny = rows
                attn[bs, o, ys, win.xs] = torch.linalg.vecdot(qg[bs, ys, win.xs], kg[bs, ny, win.nxs])
        attn[bs, :, y0:y1] = a = (attn[bs, :, y0:y1] * scale).softmax(dim=1)
        a = a * out_scale[bs, None, None, None]
        torch.mul(a[:, centre, ..., None], vg[bs, y0:y1], out=og[bs, y0:y1])
        for o, win in enumerate(windows):
            if o != centre and (rows := win.rows_in(y0, y1)) is not None:
                ys, ny = rows
                og[bs, ys, win.xs].addcmul_(a[:, o, ys.start - y0:ys.stop - y0, win.xs, None],
                                            vg[bs, ny, win.nxs])
    return out, attn


def _tensor_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out_scale: Tensor, attn: Tensor, h: int, w: int,
                     num_prefix_tokens: int, scale: float, kernel_size: int) -> tuple[Tensor, ...]:
    """The gradients of :func:`_tensor_forward`'s output with respect to ``q, k, v, out_scale``."""
    p = num_prefix_tokens
    r = kernel_size // 2
    windows = [_Window(dy, dx, h, w) for dy in range(-r, r + 1) for dx in range(-r, r + 1)]
    centre = len(windows) // 2
    grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    grad, q, k, v, d_q, d_k, d_v = (t.flatten(0, -3) for t in (grad, q, k, v, *grads))  # (BH, p + H*W, d)
    d_w = _prefix_backward(grad, v, out_scale, d_q, d_k, d_v, p)
    qg, kg, vg, gg, d_qg, d_kg, d_vg = (_grid(t, p, (h, w)) for t in (q, k, v, grad, d_q, d_k, d_v))
    # Pass 1: g_o(i) on every query row.
    g = torch.zeros_like(attn)  # p_o(i) = G_i.v_(i+o); stays zero outside the image, where a = 0
    for bs, y0, y1 in _blocks(qg):
        for o, win in enumerate(windows):
            if (rows := win.rows_in(y0, y1)) is not None:
                ys, ny = rows
                g[bs, o, ys, win.xs] = torch.linalg.vecdot(gg[bs, ys, win.xs], vg[bs, ny, win.nxs])
        a, p_o = attn[bs, :, y0:y1], g[bs, :, y0:y1]
        ap = (a * p_o).sum(dim=1, keepdim=True)
        d_w[bs] += ap.sum((1, 2, 3))
        g[bs, :, y0:y1] = a * (p_o - ap) * (out_scale[bs, None, None, None] * scale)
    # Pass 2: each block gathers the gradients of its own rows (no zero fill, no scatter).
    a = attn * out_scale[:, None, None, None]
    for bs, y0, y1 in _blocks(qg):
        own = slice(y0, y1)
        torch.mul(g[bs, centre, own, :, None], kg[bs, own], out=d_qg[bs, own])
        torch.mul(g[bs, centre, own, :, None], qg[bs, own], out=d_kg[bs, own])
        torch.mul(a[bs, centre, own, :, None], gg[bs, own], out=d_vg[bs, own])
        for o, win in enumerate(windows):
            if o == centre:
                continue
            if (rows := win.rows_in(y0, y1)) is not None:  # query rows in the block
                ys, ny = rows
                d_qg[bs, ys, win.xs].addcmul_(g[bs, o, ys, win.xs, None], kg[bs, ny, win.nxs])
            if (rows := win.rows_in(y0, y1, of_neighbours=True)) is not None:  # key rows in the block
                ys, ny = rows
                d_kg[bs, ny, win.nxs].addcmul_(g[bs, o, ys, win.xs, None], qg[bs, ys, win.xs])
                d_vg[bs, ny, win.nxs].addcmul_(a[bs, o, ys, win.xs, None], gg[bs, ys, win.xs])
    return *grads, d_w


# The grid as two SymInt scalars, not a list: torch.jit.trace records those as constants.
_FORWARD_SCHEMA = ('(Tensor q, Tensor k, Tensor v, Tensor out_scale, SymInt h, SymInt w, int num_prefix_tokens, '
                   'float scale, int kernel_size) -> (Tensor, Tensor)')
_BACKWARD_SCHEMA = ('(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor out_scale, Tensor attn, SymInt h, SymInt w, '
                    'int num_prefix_tokens, float scale, int kernel_size) -> (Tensor, Tensor, Tensor, Tensor)')


def _define(name: str, forward: Callable, backward: Callable, attn_shape: Callable[..., tuple]) -> None:
    """Register ``lisa::NAME`` (``forward``) and ``lisa::NAME_backward`` as custom ops, with fake
    implementations (``attn_shape(BH, H, W, k*k)``: the weights' layout) and ``backward`` as autograd."""
    forward_op = torch.library.custom_op(f'lisa::{name}', forward, mutates_args=(), schema=_FORWARD_SCHEMA)
    backward_op = torch.library.custom_op(f'lisa::{name}_backward', backward, mutates_args=(), schema=_BACKWARD_SCHEMA)

    @forward_op.register_fake
    def _(q, k, v, out_scale, h, w, num_prefix_tokens, scale, kernel_size):
        return torch.empty_like(v), q.new_empty(attn_shape(math.prod(q.shape[:-2]), h, w, kernel_size ** 2))

    @backward_op.register_fake
    def _(grad, q, k, v, out_scale, *args):
        return tuple(torch.empty_like(t) for t in (q, k, v, out_scale))

    def setup_context(ctx, inputs: tuple, output: tuple) -> None:
        q, k, v, out_scale, *ctx.args = inputs
        ctx.save_for_backward(q, k, v, out_scale, output[1])
        ctx.set_materialize_grads(False)  # no zero gradient for the attention weights

    def backward_of(ctx, grad: Tensor, _: Tensor) -> tuple:
        if grad is None:
            return (None,) * 9
        return *backward_op(grad.contiguous(), *ctx.saved_tensors, *ctx.args), None, None, None, None, None

    forward_op.register_autograd(backward_of, setup_context=setup_context)


_define('neighbourhood_fused', _fused_forward, _fused_backward, lambda bh, h, w, kk: (bh, h, w, kk))
_define('neighbourhood', _tensor_forward, _tensor_backward, lambda bh, h, w, kk: (bh, kk, h, w))

#: The neighbourhood attention by backend (:mod:`.backend`), one signature, :func:`neighbourhood_attention`'s
#: without ``backend``.
IMPLEMENTATIONS = {'reference': neighbourhood_attention_reference, 'torch': _custom_op(torch.ops.lisa.neighbourhood),
                   'cpu_kernel': _custom_op(torch.ops.lisa.neighbourhood_fused)}
