"""The truncated random walk of LiSA, evaluated in d x d feature space.

Notation per (batch, head): non-negative features ``q, k (n, d)``, values
``v (n, dv)``. The transition matrix (paper §3.1)

    S = Q~ K^T,   Q~ = diag(Q K^T 1)^-1 Q,   i.e.  S_ij = q_i.k_j / sum_l q_i.k_l

is row-stochastic with rank <= d. It is never built: since
``S^k V = Q~ (K^T Q~)^(k-1) (K^T V)`` for k >= 1 (Eq. 8), every walk term is
``Q~ M_k`` with the d x dv matrices ``M_1 = K^T V``, ``M_k = (K^T Q~) M_(k-1)``.

Scale-free evaluation. ``S`` does not change if ``q_i`` is scaled by any
positive per-token factor, or ``K`` by any positive global factor, so we use
``q_i / max(q_i)`` and ``K / max(K)`` and write every sum over tokens as a
mean split as ``(a n^-1/2)^T (b n^-1/2)`` (FLatten's mean form). Then no
intermediate grows with n or with the activations' size, which keeps
fp16/bf16 finite. The stabilising epsilon enters as

    S_ij = q_i.k_j / (sum_l q_i.k_l + eps n max(q_i) max(K)),

scale-free as well; it only matters for an all-zero q_i (ReLU features).

Backends (:mod:`.backend`, the table :data:`IMPLEMENTATIONS`). ``'reference'``:
:func:`random_walk_reference`, the definition, Eq. 8 in a few lines of tensor code
differentiated by autograd. ``'torch'``: the same forward with an analytic backward, as
the registered custom op ``lisa::random_walk`` (so ``torch.compile`` traces it), its
token-wise passes in tensor operations (:class:`TensorPasses`); ``'cpu_kernel'``: that op
with its token-wise passes by the compiled kernels (:class:`KernelPasses`,
``walk_cpu.cpp``), the op's flag ``kernels`` naming the passes. The tests hold every
backend to the reference in float64, forward and gradients.
T = infinity has one implementation, :func:`untruncated_walk`, plain tensor code.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from .backend import choose, extension

#: Elements of a per-step temporary (``(tokens, (T - 1) d)``: the hops, their gradient) built at a
#: time: the token passes of the per-token weights run over blocks of batch-heads or of tokens
#: (:func:`_blocks`), so that no such temporary exists for all the tokens at once.
BLOCK_ELEMENTS = 1 << 20


def geometric_weights(beta: float, num_steps: int) -> Tensor:
    """Renormalised truncated geometric weights of Eq. 4.

    ``c_k = (1 - beta) / (1 - beta^T) * beta^k`` for ``k = 0 .. T-1``; they
    sum to one. ``beta = 0`` gives the self-loop ``c = (1, 0, ...)``.
    """
    k = torch.arange(num_steps, dtype=torch.float64)
    return (1 - beta) / (1 - beta ** num_steps) * beta ** k


def transition_factors(q: Tensor, k: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Return ``(q_hat, k_bar)`` with ``S = q_hat @ k_bar^T``, both ``(B, h, n, d)``.

    ``q_hat_i = q_i' / (q_i' . mean(k') + eps) n^-1/2`` and ``k_bar = k' n^-1/2``
    for the rescaled ``q' = q / max(q_i)``, ``k' = k / max(K)`` (module docstring).
    """
    n = k.shape[-2]
    q = q / q.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(q.dtype).tiny)
    k = k / k.amax(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(k.dtype).tiny)
    rows = (q * k.mean(dim=-2, keepdim=True)).sum(-1, keepdim=True) + eps
    return q / (rows * n ** 0.5), k * n ** -0.5


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """The autocast dtype where autocast is on, else the promoted dtype of ``tensors``."""
    device = tensors[0].device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def random_walk(q: Tensor, k: Tensor, v: Tensor, weights: Tensor, eps: float, backend: str | None = None) -> Tensor:
    """``Y_i = sum_{k=0}^{T-1} w_k(i) (S^k V)_i`` (Eq. 4 and Eq. 10), ``(B, h, n, dv)``.

    ``q, k (B, h, n, d)`` are the non-negative features; ``weights (..., T)``
    broadcasts to ``(B, h, n, T)``: fixed step weights (``(T,)``, or per head
    ``(1, h, 1, T)``) or per-token weights ``(B, h, n, T)``. With the d x dv
    matrices ``M_1 = K^T V``, ``M_k = (K^T Q~) M_(k-1)``:

        Y = w_0 V + sum_{k>=1} w_k Q~ M_k

    Fixed weights fold into one d x dv matrix; per-token weights read
    ``Q~ [M_1 | ... | M_(T-1)]`` in a single token pass. The custom op's backward is
    analytic (:func:`_walk_backward`): it keeps ``Q~``, ``K / max(K)``, ``V``, the weights
    and the d x dv matrices, never a token-sized tensor per walk term; it runs in the
    autocast dtype under autocast. ``backend``: :mod:`.backend` (:data:`IMPLEMENTATIONS`).
    """
    walk = choose(IMPLEMENTATIONS, backend, q, k, v, weights, dtype=compute_dtype(q, k, v))
    return walk(q, k, v, weights, eps)


def random_walk_reference(q: Tensor, k: Tensor, v: Tensor, weights: Tensor, eps: float) -> Tensor:
    """:func:`random_walk` as its definition, Eq. 8 term by term, differentiated by autograd::

        Y = w_0 V + sum_{t=1}^{T-1} w_t Q~ (K^T Q~)^(t-1) (K^T V)
    """
    q_hat, k_bar = transition_factors(q, k, eps)
    a, m = k_bar.transpose(-2, -1) @ q_hat, k_bar.transpose(-2, -1) @ v
    out = weights[..., :1] * v
    for t in range(1, weights.shape[-1]):
        out = out + weights[..., t:t + 1] * (q_hat @ m)
        m = a @ m
    return out


def _custom_op(kernels: bool) -> Callable[..., Tensor]:
    """:func:`random_walk` by the custom op ``lisa::random_walk``, outside autocast in the computation
    dtype (:func:`compute_dtype`), its token-wise passes by the compiled kernels with ``kernels``."""

    def walk(q: Tensor, k: Tensor, v: Tensor, weights: Tensor, eps: float) -> Tensor:
        dtype = compute_dtype(q, k, v)
        with torch.autocast(q.device.type, enabled=False):
            if weights.shape[-1] == 1:
                return v * weights.to(v.dtype)
            w = weights.to(dtype).reshape((1,) * (4 - weights.dim()) + weights.shape)
            return torch.ops.lisa.random_walk(q.to(dtype), k.to(dtype), v.to(dtype), w, eps, kernels)[0].to(v.dtype)

    return walk


def _add_matmul_(out: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``out += a @ b`` for ``(..., n, m)`` batches, accumulated by the matmul itself
    (``out`` contiguous)."""
    out.flatten(0, -3).baddbmm_(a.flatten(0, -3), b.flatten(0, -3))
    return out


def _row_dot(a: Tensor, b: Tensor) -> Tensor:
    """``(a * b).sum(-1)`` as a batched product (no product tensor; ``linalg.vecdot`` makes one)."""
    return torch.einsum('...i,...i->...', a, b)


def _sum_to(x: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``x`` over the dimensions that were broadcast from ``shape`` (same rank)."""
    dims = tuple(i for i, (s, t) in enumerate(zip(shape, x.shape)) if s == 1 and t != 1)
    return x.sum(dims, keepdim=True) if dims else x


class TensorPasses:
    """The walk's token-wise passes (around its d x d products) in tensor operations: backend ``'torch'``,
    and the fake implementation of both backends' op."""

    @staticmethod
    def row_argmax(x: Tensor) -> Tensor:
        """``x.argmax(-1, keepdim=True)``: the first index among equal maxima."""
        return x.argmax(-1, keepdim=True)

    def scaled_features(self, q: Tensor, k: Tensor, eps: float) -> list[Tensor]:
        """``[q_hat, k_bar, mq, mk, c, q_scale, k_scale, mu]`` of :func:`_walk_forward`'s first lines."""
        n = k.shape[-2]
        s = n ** -0.5
        sd = torch.promote_types(q.dtype, torch.float32)  # per-token scalars: float32 at least
        mq = q.amax(dim=-1, keepdim=True).to(sd)                            # (B, h, n, 1)
        mk = k.amax(dim=(-2, -1), keepdim=True).to(sd)                      # (B, h, 1, 1)
        k_scale = torch.where(mk > 0, s / mk, 0.0)                          # an all-zero K stays zero
        k_bar = torch.mul(k, k_scale, out=torch.empty_like(k, memory_format=torch.contiguous_format))
        mu = k_bar.sum(-2, keepdim=True, dtype=sd) * s                      # (B, h, 1, d), <= 1
        qmu = q.to(sd) @ mu.transpose(-2, -1)                               # (B, h, n, 1)
        nonzero = mq > 0
        c = s / (torch.where(nonzero, qmu / mq, 0.0) + eps)
        q_scale = torch.where(nonzero, c / mq, 0.0)                         # an all-zero q_i stays zero
        q_hat = torch.mul(q, q_scale, out=torch.empty_like(q, memory_format=torch.contiguous_format))
        return [q_hat, k_bar, mq, mk, c, q_scale, k_scale, mu]

    def combine(self, v: Tensor, hops: Tensor, weights: Tensor, out: Tensor) -> None:
        """``out = w_0 v + sum_{t>=1} w_t hop_t`` for per-token weights, ``hops (..., n, (T-1) dv)``."""
        torch.mul(weights[..., :1], v, out=out)
        for t, hop in enumerate(hops.chunk(weights.shape[-1] - 1, dim=-1), start=1):
            out.addcmul_(weights[..., t:t + 1], hop)

    def combine_backward(self, grad: Tensor, v: Tensor, q_hat: Tensor, proj: Tensor, weights: Tensor,
                         d_q_hat: Tensor, d_w: Tensor) -> Tensor:
        """Backward of :meth:`combine` with ``hop_t = q_hat M_t``, from ``proj_t = grad M_t^T``: writes
        ``d q_hat = sum_t w_t proj_t`` and ``d w (..., n, T)``, returns ``[w_1 grad | ... | w_(T-1) grad]``
        (for ``d M = q_hat^T (.)``)."""
        steps = weights.shape[-1] - 1
        w_grad = grad.new_empty(grad.shape[:-1] + (steps * grad.shape[-1],))
        d_w[..., 0] = _row_dot(grad, v)
        for t, (p, wg) in enumerate(zip(proj.chunk(steps, dim=-1), w_grad.chunk(steps, dim=-1)), start=1):
            w_t = weights[..., t:t + 1]
            d_w[..., t] = _row_dot(q_hat, p)
            if t == 1:
                torch.mul(p, w_t, out=d_q_hat)
            else:
                d_q_hat.addcmul_(p, w_t)
            torch.mul(grad, w_t, out=wg)
        return w_grad

    def q_backward(self, d_q_hat: Tensor, q_hat: Tensor, mu: Tensor, mq: Tensor, c: Tensor, q_scale: Tensor,
                   eps: float) -> tuple[Tensor, Tensor]:
        """``(d q, d mu)`` from ``d q_hat`` (overwritten): ``q_hat_i = c_i q_i / mq_i``,
        ``c_i = s / (q_i.mu / mq_i + eps)``; with ``e_i = -(q_hat_i.d_q_hat_i) / s``,
        ``d q_i = (c_i / mq_i) (d_q_hat_i + e_i mu)`` (+ ``eps c_i e_i / mq_i`` at the argmax of
        ``q_i``), ``d mu = sum_i e_i q_hat_i``."""
        s = q_hat.shape[-2] ** -0.5
        e = _row_dot(q_hat, d_q_hat).unsqueeze(-1) * (-1 / s)
        d_mu = (e.transpose(-2, -1) @ q_hat).to(mu.dtype)
        d_q = torch.mul(d_q_hat.addcmul_(e, mu.to(e.dtype)), q_scale, out=d_q_hat)
        # the argmax found now (not saved): q_hat_i is a positive multiple of q_i
        d_q.scatter_add_(-1, self.row_argmax(q_hat), (e * c * torch.where(mq > 0, eps / mq, 0.0)).to(d_q.dtype))
        return d_q, d_mu


class KernelPasses(TensorPasses):
    """The walk's token-wise passes by the compiled CPU kernels (``walk_cpu.cpp``): backend ``'cpu_kernel'``.
    The per-token passes take contiguous blocks (:func:`_blocks`)."""

    @staticmethod
    def row_argmax(x: Tensor) -> Tensor:
        """As :meth:`TensorPasses.row_argmax`: torch's argmax over rows of a head's width is ~10x slower
        than a pass over them."""
        return extension('walk').row_argmax(x.contiguous())

    def scaled_features(self, q: Tensor, k: Tensor, eps: float) -> list[Tensor]:
        return extension('walk').walk_prepare(q.contiguous(), k.contiguous(), eps)

    def combine(self, v: Tensor, hops: Tensor, weights: Tensor, out: Tensor) -> None:
        extension('walk').walk_combine(v, hops, weights, out)

    def combine_backward(self, grad: Tensor, v: Tensor, q_hat: Tensor, proj: Tensor, weights: Tensor,
                         d_q_hat: Tensor, d_w: Tensor) -> Tensor:
        return extension('walk').walk_combine_backward(grad, v, q_hat, proj, weights, d_q_hat, d_w)

    def q_backward(self, d_q_hat: Tensor, q_hat: Tensor, mu: Tensor, mq: Tensor, c: Tensor, q_scale: Tensor,
                   eps: float) -> tuple[Tensor, Tensor]:
        return d_q_hat, extension('walk').walk_q_backward(d_q_hat, q_hat, mu, mq, c, q_scale, eps)


#: The passes of the op's flag ``kernels``.
PASSES = {False: TensorPasses(), True: KernelPasses()}


def _blocks(bh: int, n: int, width: int, blocked: bool = True) -> Iterator[tuple[slice, slice]]:
    """``(batch-heads, tokens)`` blocks of ``(BH, n, .)`` tokens whose per-step temporary ``(., width)``
    has at most :data:`BLOCK_ELEMENTS` elements (or is one token): groups of whole batch-heads, or
    token ranges of one; ``tokens`` indexes the flattened ``(BH n)`` tokens, so that a block of a
    contiguous tensor is contiguous. Not ``blocked`` (the fake implementations, whose sizes may be
    symbolic): one block."""
    if not blocked:
        yield slice(0, bh), slice(0, bh * n)
        return
    if n * width <= BLOCK_ELEMENTS:
        group = BLOCK_ELEMENTS // max(1, n * width)  # n = 0: one block of every batch-head
        for h0 in range(0, bh, group):
            h1 = min(bh, h0 + group)
            yield slice(h0, h1), slice(h0 * n, h1 * n)
        return
    rows = max(1, BLOCK_ELEMENTS // width)
    for h in range(bh):
        for r0 in range(0, n, rows):
            yield slice(h, h + 1), slice(h * n + r0, h * n + min(n, r0 + rows))


def _rows(t: Tensor) -> Tensor:
    """A contiguous ``(..., n, w)`` tensor as its ``(BH n, w)`` tokens (a view)."""
    return t.view(-1, t.shape[-1])


def _block(tokens: Tensor, heads: slice, rows: slice) -> Tensor:
    """The ``(batch-heads, tokens, w)`` view of one :func:`_blocks` block of ``(BH n, w)`` tokens (sizes
    given: with no tokens a ``-1`` would be ambiguous)."""
    count = heads.stop - heads.start
    return tokens[rows].view(count, (rows.stop - rows.start) // count, tokens.shape[-1])


def _per_token(weights: Tensor, v: Tensor) -> Tensor:
    """Per-token weights ``(..., n, T)`` broadcast to ``v``'s tokens, contiguous."""
    return weights.expand(*v.shape[:-1], weights.shape[-1]).contiguous()


def _walk_forward(q: Tensor, k: Tensor, v: Tensor, weights: Tensor, eps: float,
                  kernels: bool, blocked: bool = True) -> tuple[Tensor, list[Tensor]]:
    """The walk of :func:`random_walk`: its output and what :func:`_walk_backward` needs.

    Forward, per (batch, head), with ``s = n^-1/2``, ``mq_i = max_c q_ic`` and
    ``mk = max K``:

        k_bar = k s / mk              mu = s sum_j k_bar_j      (the mean of K / mk)
        r_i = q_i.mu / mq_i + eps     c_i = s / r_i             q_hat_i = c_i q_i / mq_i
        A = k_bar^T q_hat,  M_1 = k_bar^T v,  M_(t+1) = A M_t   (S = q_hat k_bar^T)
        Y = w_0 v + sum_{t>=1} w_t q_hat M_t

    Backward runs this chain in reverse. ``S`` is invariant to the scale of
    ``q_i`` and of ``K`` except through eps, so the gradient the maxima pass
    on to their argmax is the eps term's, in closed form. Token-sized tensors
    saved: ``q_hat`` and ``k_bar`` beside the inputs ``v`` and the weights.
    ``kernels``: the token-wise passes by the compiled CPU kernels (backend
    ``'cpu_kernel'``, :data:`PASSES`); the fake implementation passes False. With per-token weights
    the hops ``Q~ M_t`` exist for one block of tokens at a time (:func:`_blocks`; ``blocked`` False:
    all at once, for the fake implementation), as their gradients in the backward.
    """
    passes = PASSES[kernels]
    saved = passes.scaled_features(q, k, eps)
    q_hat, k_bar = saved[:2]
    kt = k_bar.transpose(-2, -1)
    a, m = kt @ q_hat, [kt @ v]
    for _ in range(weights.shape[-1] - 2):
        m.append(a @ m[-1])
    m = torch.stack(m, dim=-3)                                          # (B, h, T-1, d, dv)
    if weights.shape[-2] == 1:  # the same weights for every token: fold them
        out = (q_hat @ (weights[..., 0, 1:, None, None] * m).sum(-3)).addcmul_(weights[..., :1], v)
    else:  # Q~ [M_1 | ... | M_(T-1)] block by block, straight into the combination
        v = v.contiguous()
        out = torch.empty_like(v)
        m_cat = m.transpose(-3, -2).flatten(-2).flatten(0, -3)          # (BH, d, (T-1) dv)
        tokens = [_rows(t) for t in (q_hat, v, _per_token(weights, v), out)]
        for heads, rows in _blocks(m_cat.shape[0], v.shape[-2], m_cat.shape[-1], blocked):
            qb, vb, wb, ob = (_block(t, heads, rows) for t in tokens)
            passes.combine(vb, torch.bmm(qb, m_cat[heads]), wb, ob)
    return out, [*saved, a, m]


def _walk_backward(grad: Tensor, v: Tensor, weights: Tensor, saved: list[Tensor], eps: float,
                   kernels: bool, blocked: bool = True) -> list[Tensor]:
    """Gradients of :func:`_walk_forward`'s output with respect to ``q, k, v, weights``."""
    passes = PASSES[kernels]
    q_hat, k_bar, mq, mk, c, q_scale, k_scale, mu, a, m = saved
    s = k_bar.shape[-2] ** -0.5
    steps = m.shape[-3]  # T - 1
    # Y = w_0 v + sum_t w_t q_hat M_t  ->  d q_hat, d M_t, d w
    if weights.shape[-2] == 1:
        d_m_w = q_hat.transpose(-2, -1) @ grad
        d_q_hat = grad @ (weights[..., 0, 1:, None, None] * m).sum(-3).transpose(-2, -1)
        d_m = weights[..., 0, 1:, None, None] * d_m_w.unsqueeze(-3)
        d_w = torch.cat([(grad * v).sum((-2, -1))[..., None],
                         (d_m_w.unsqueeze(-3) * m).sum((-2, -1))], dim=-1).unsqueeze(-2)
    else:  # block by block (_blocks): proj = grad [M_1 | ... | M_(T-1)]^T and W = [w_1 grad | ...] per block
        grad, v, weights_ = grad.contiguous(), v.contiguous(), _per_token(weights, v)
        m_cat = m.transpose(-2, -1).transpose(-3, -2).flatten(-2).flatten(0, -3)  # (BH, dv, (T-1) d)
        d_q_hat, d_w = torch.empty_like(q_hat), torch.empty_like(weights_)
        d_m = grad.new_zeros(m_cat.shape[0], q_hat.shape[-1], steps * grad.shape[-1])  # q_hat^T W, (BH, d, (T-1) dv)
        tokens = [_rows(t) for t in (grad, v, q_hat, weights_, d_q_hat, d_w)]
        for heads, rows in _blocks(m_cat.shape[0], v.shape[-2], m_cat.shape[-1], blocked):
            gb, vb, qb, wb, dqb, dwb = (_block(t, heads, rows) for t in tokens)
            w_grad = passes.combine_backward(gb, vb, qb, torch.bmm(gb, m_cat[heads]), wb, dqb, dwb)
            d_m[heads].baddbmm_(qb.transpose(-2, -1), w_grad)
        d_m = d_m.view(*m.shape[:-3], q_hat.shape[-1], steps, m.shape[-1]).transpose(-3, -2)
    d_weights = _sum_to(d_w, weights.shape)
    # M_(t+1) = A M_t
    d_a = torch.zeros_like(a)
    d_m = list(d_m.unbind(-3))
    for t in range(steps - 1, 0, -1):
        d_a += d_m[t] @ m[..., t - 1, :, :].transpose(-2, -1)
        d_m[t - 1] = d_m[t - 1] + a.transpose(-2, -1) @ d_m[t]
    # A = k_bar^T q_hat, M_1 = k_bar^T v
    _add_matmul_(d_q_hat, k_bar, d_a)
    d_v = _add_matmul_(torch.mul(grad, weights[..., :1], out=grad.new_empty(grad.shape)), k_bar, d_m[0])
    d_k_bar = _add_matmul_(q_hat @ d_a.transpose(-2, -1), v, d_m[0].transpose(-2, -1))
    d_q, d_mu = passes.q_backward(d_q_hat, q_hat, mu, mq, c, q_scale, eps)
    # k_bar = k s / mk, mu = s sum_j k_bar_j: sum(d_k_bar * k_bar) from the d x d products
    d_mk = -torch.where(mk > 0, ((d_a * a).sum((-2, -1), keepdim=True) + (d_m[0] * m[..., 0, :, :]).sum(
        (-2, -1), keepdim=True) + (d_mu * mu).sum((-2, -1), keepdim=True)) / mk, 0.0)
    d_k = torch.addcmul((d_mu * (s * k_scale)).to(d_k_bar.dtype), d_k_bar, k_scale, out=d_k_bar)
    d_k.flatten(-2).scatter_add_(-1, passes.row_argmax(k_bar.flatten(-2)), d_mk.flatten(-2).to(d_k.dtype))
    return [d_q, d_k, d_v, d_weights]


def _setup_context(ctx, inputs: tuple, output: tuple) -> None:
    _, _, v, weights, ctx.eps, ctx.kernels = inputs
    ctx.save_for_backward(v, weights, *output[1])
    ctx.set_materialize_grads(False)  # no zero gradients for the saved outputs


def _backward(ctx, grad: Tensor, _: list) -> tuple:
    if grad is None:
        return (None,) * 6
    v, weights, *saved = ctx.saved_tensors
    return (*_backward_op(grad, v, weights, saved, ctx.eps, ctx.kernels), None, None)


# Backends 'torch' and 'cpu_kernel' as custom ops (opaque to torch.compile, with autograd); their
# fake implementations are the same code without the compiled kernels, run on fake tensors.
_forward_op = torch.library.custom_op('lisa::random_walk', _walk_forward, mutates_args=(), schema=(
    '(Tensor q, Tensor k, Tensor v, Tensor weights, float eps, bool kernels) -> (Tensor, Tensor[])'))
_backward_op = torch.library.custom_op('lisa::random_walk_backward', _walk_backward, mutates_args=(), schema=(
    '(Tensor grad, Tensor v, Tensor weights, Tensor[] saved, float eps, bool kernels) -> Tensor[]'))
_forward_op.register_fake(lambda q, k, v, weights, eps, kernels: _walk_forward(q, k, v, weights, eps, False, False))
_backward_op.register_fake(lambda grad, v, weights, saved, eps, kernels: _walk_backward(grad, v, weights, saved,
                                                                                         eps, False, False))
_forward_op.register_autograd(_backward, setup_context=_setup_context)

#: The walk by backend (:mod:`.backend`), one signature ``(q, k, v, weights, eps)``.
IMPLEMENTATIONS = {'reference': random_walk_reference, 'torch': _custom_op(False), 'cpu_kernel': _custom_op(True)}


def untruncated_walk(q_hat: Tensor, k_bar: Tensor, v: Tensor, beta: float) -> Tensor:
    """``(1 - beta) (I - beta S)^-1 V``, the walk with T = infinity.

    By the Woodbury (push-through) identity
    ``(I - beta Q~ K^T)^-1 = I + beta Q~ (I_d - beta K^T Q~)^-1 K^T``, so

        Y = (1 - beta) (V + beta Q~ (I_d - beta K^T Q~)^-1 K^T V),

    a d x d solve. ``I_d - beta K^T Q~`` is invertible for beta < 1 because
    ``K^T Q~`` shares the non-zero spectrum of ``S`` (radius <= 1). The solve
    runs in float32 at least; in an ONNX export (which has no solve) by :func:`solve_unpivoted`.
    """
    a = k_bar.transpose(-2, -1) @ q_hat
    m = k_bar.transpose(-2, -1) @ v
    dtype = torch.promote_types(a.dtype, torch.float32)
    eye = torch.eye(a.shape[-1], dtype=dtype, device=a.device)
    solve = solve_unpivoted if torch.onnx.is_in_onnx_export() else torch.linalg.solve
    x = solve(eye - beta * a.to(dtype), m.to(dtype)).to(v.dtype)
    return (1 - beta) * (v + beta * (q_hat @ x))


def solve_unpivoted(a: Tensor, b: Tensor) -> Tensor:
    """``torch.linalg.solve(a, b)`` by Gauss-Jordan elimination of ``[a | b]`` without pivoting,
    unrolled over the static size ``d`` of ``a (..., d, d)``: plain tensor operations, for ONNX.

    Step i divides row i by its pivot ``a_ii`` and subtracts ``a_ji`` times it from every other
    row j. :func:`untruncated_walk` solves with ``I - beta K^T Q~``, a nonsingular M-matrix
    (``K^T Q~ >= 0`` has spectral radius <= 1, ``beta < 1``): its pivots stay positive and the
    elimination without pivoting is stable.
    """
    d = a.shape[-1]
    eye = torch.eye(d, dtype=a.dtype, device=a.device)
    m = torch.cat([a, b], dim=-1)                                  # (..., d, d + k)
    for i in range(d):
        row = m[..., i:i + 1, :] / m[..., i:i + 1, i:i + 1]        # row i / a_ii
        m = m - (m[..., :, i:i + 1] - eye[:, i:i + 1]) * row       # row i becomes row / a_ii, column i -> e_i
    return m[..., d:]
