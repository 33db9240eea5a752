"""FLatten's focused kernel features of :class:`~..base.KernelAttention`, as one operator.

Backends (:mod:`.backend`, the table :data:`IMPLEMENTATIONS`): ``'reference'``
(:func:`kernel_features_reference`, plain tensor code), ``'torch'`` (the same entry: the definition
is already a few tensor operations, no custom op of its own), ``'cpu_kernel'``
(``lisa::kernel_features``, ``features_cpu.cpp``: one pass over the tokens straight into a
contiguous per-head layout, a fake implementation and an analytic backward registered as its
autograd, so ``torch.compile`` traces it into one graph).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .backend import choose, extension


def focus(x: Tensor, p: float) -> Tensor:
    """FLatten's focusing function ``f_p(x) = ||x|| / ||x^p|| * x^p`` for ``x > 0``.

    ``f_p`` is 1-homogeneous, so it is evaluated on ``u = x / max(x)`` and
    scaled back: ``f_p(x) = max(x) ||u|| u^p / ||u^p||``. Nothing is raised
    to the p-th power above 1, so fp16 cannot overflow, and the (detached)
    rescaling leaves the value and the gradient exact.
    """
    m = x.detach().amax(dim=-1, keepdim=True)
    u = x / m
    up = u.pow(p)
    return up * (m * u.norm(dim=-1, keepdim=True) / up.norm(dim=-1, keepdim=True))


def kernel_features(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int, p: float,
                    backend: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """FLatten's focused ReLU features: from ``qkv (B, N, 3C)`` (columns q, k, v), the positional
    encoding ``pos (1, N, C)`` added to k (or None) and ``s = softplus(scale) (C,)``, the
    ``(B, heads, N, C / heads)`` tensors

        q = f_p((relu(q) + 1e-6) / s),   k = f_p((relu(k + pos) + 1e-6) / s),   v

    (:func:`focus`). The CPU kernel writes them contiguous per head and its backward recomputes
    the features from ``qkv`` (nothing token-sized is kept but ``qkv``)."""
    tensors = (qkv, s) if pos is None else (qkv, pos, s)
    return choose(IMPLEMENTATIONS, backend, *tensors)(qkv, pos, s, heads, p)


def kernel_features_reference(qkv: Tensor, pos: Tensor | None, s: Tensor | None, heads: int, p: float | None,
                              feature_map: Callable[[Tensor], Tensor] = F.relu) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`kernel_features` as its definition, for any ``feature_map`` phi; without focusing
    (``s``, ``p`` None) just ``phi(q), phi(k + pos), v``."""
    q, k, v = qkv.chunk(3, dim=-1)
    if pos is not None:
        k = k + pos
    q, k = feature_map(q), feature_map(k)
    if s is not None:
        q, k = focus((q + 1e-6) / s, p), focus((k + 1e-6) / s, p)
    return tuple(t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in (q, k, v))  # (B, N, h d) -> (B, h, N, d)


def _custom_op(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int, p: float) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`kernel_features` by the custom op ``lisa::kernel_features`` (the CPU kernel)."""
    pos = pos.contiguous() if pos is not None else None
    return torch.ops.lisa.kernel_features(qkv.contiguous(), pos, s.contiguous(), heads, float(p))


@torch.library.custom_op('lisa::kernel_features', mutates_args=(), schema=(
    '(Tensor qkv, Tensor? pos, Tensor s, int heads, float p) -> (Tensor, Tensor, Tensor)'))
def _kernel_features(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int, p: float) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(extension('features').features_forward(qkv, pos, s, heads, p))


@torch.library.custom_op('lisa::kernel_features_backward', mutates_args=(), schema=(
    '(Tensor gq, Tensor gk, Tensor gv, Tensor qkv, Tensor? pos, Tensor s, int heads, float p) -> (Tensor, Tensor)'))
def _kernel_features_backward(gq: Tensor, gk: Tensor, gv: Tensor, qkv: Tensor, pos: Tensor | None, s: Tensor,
                              heads: int, p: float) -> tuple[Tensor, Tensor]:
    return tuple(extension('features').features_backward(gq, gk, gv, qkv, pos, s, heads, p))


@_kernel_features.register_fake
def _(qkv, pos, s, heads, p):
    b, n, c = qkv.shape
    return tuple(qkv.new_empty(b, heads, n, c // (3 * heads)) for _ in range(3))


@_kernel_features_backward.register_fake
def _(gq, gk, gv, qkv, pos, s, heads, p):
    return torch.empty_like(qkv), torch.empty_like(s)


def _features_setup(ctx, inputs: tuple, output: tuple) -> None:
    qkv, pos, s, ctx.heads, ctx.p = inputs
    ctx.save_for_backward(qkv, pos, s)


def _features_backward(ctx, gq: Tensor, gk: Tensor, gv: Tensor) -> tuple:
    qkv, pos, s = ctx.saved_tensors
    d_qkv, d_s = _kernel_features_backward(gq.contiguous(), gk.contiguous(), gv.contiguous(), qkv, pos, s,
                                           ctx.heads, ctx.p)
    c = s.shape[0]
    d_pos = d_qkv[..., c:2 * c].sum(0, keepdim=True) if pos is not None else None
    return d_qkv, d_pos, d_s, None, None


_kernel_features.register_autograd(_features_backward, setup_context=_features_setup)

#: The kernel features by backend (:mod:`.backend`), one signature ``(qkv, pos, s, heads, p)``.
IMPLEMENTATIONS = {'reference': kernel_features_reference, 'torch': kernel_features_reference,
                   'cpu_kernel': _custom_op}
