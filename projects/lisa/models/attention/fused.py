"""Fused CPU kernels of the kernel attentions' token-wise parts, as custom ops (``lisa::*``).

``csrc/features_cpu.cpp`` (and ``csrc/walk_cpu.cpp``, the walk's passes, called inside
``lisa::random_walk``), built by ``pip install -e .`` (setup.py). Each op has a fake
implementation and an analytic backward registered as its autograd, so ``torch.compile``
traces it into one graph. :class:`~.base.KernelAttention` uses them with
``implementation='fast'`` on the CPU in float32/float64 (not under autocast) where the
kernels are built; otherwise, and with ``implementation='reference'``, the same math runs
in plain tensor operations, which the tests hold the ops to.
"""
from __future__ import annotations

import torch
from torch import Tensor

try:  # not built: plain tensor operations (same results, slower on the CPU)
    from . import _features_cpu as CPU_KERNEL
except ImportError:
    CPU_KERNEL = None
try:  # the walk's token-wise passes (csrc/walk_cpu.cpp), used by .walk
    from . import _walk_cpu as WALK_KERNEL
except ImportError:
    WALK_KERNEL = None


def available(kernel: object, *tensors: Tensor) -> bool:
    """Whether the fused CPU ``kernel`` (:data:`CPU_KERNEL` or :data:`WALK_KERNEL`, read by the caller,
    None where not built) can run on ``tensors``: CPU, float32/float64, no autocast, not under
    ``torch.export`` (which ``torch.onnx.export(..., dynamo=True)`` runs): an exported graph holds
    plain tensor operations, which every exporter and runtime can represent, not the ``lisa::`` ops."""
    return (kernel is not None and all(t.device.type == 'cpu' and t.dtype in (torch.float32, torch.float64)
                                       for t in tensors) and not torch.is_autocast_enabled('cpu')
            and not torch.compiler.is_exporting())


@torch.library.custom_op('lisa::depthwise_conv', mutates_args=(), schema=(
    '(Tensor x, Tensor weight, Tensor bias, SymInt h, SymInt w, int num_prefix_tokens) -> Tensor'))
def _depthwise_conv(x: Tensor, weight: Tensor, bias: Tensor, h: int, w: int, num_prefix_tokens: int) -> Tensor:
    return CPU_KERNEL.depthwise_forward(x, weight, bias, num_prefix_tokens, h, w)


@torch.library.custom_op('lisa::depthwise_conv_backward', mutates_args=(), schema=(
    '(Tensor grad, Tensor x, Tensor weight, SymInt h, SymInt w, int num_prefix_tokens) -> (Tensor, Tensor, Tensor)'))
def _depthwise_conv_backward(grad: Tensor, x: Tensor, weight: Tensor, h: int, w: int,
                             num_prefix_tokens: int) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(CPU_KERNEL.depthwise_backward(grad, x, weight, num_prefix_tokens, h, w))


@_depthwise_conv.register_fake
def _(x, weight, bias, h, w, num_prefix_tokens):
    return torch.empty_like(x)


@_depthwise_conv_backward.register_fake
def _(grad, x, weight, h, w, num_prefix_tokens):
    return torch.empty_like(x), weight.new_empty(weight.shape), weight.new_empty(weight.shape[0])


def _depthwise_setup(ctx, inputs: tuple, output: Tensor) -> None:
    x, weight, _, ctx.h, ctx.w, ctx.p = inputs
    ctx.save_for_backward(x, weight)


def _depthwise_backward(ctx, grad: Tensor) -> tuple:
    x, weight = ctx.saved_tensors
    d_x, d_weight, d_bias = _depthwise_conv_backward(grad.contiguous(), x, weight, ctx.h, ctx.w, ctx.p)
    return d_x, d_weight, d_bias, None, None, None


_depthwise_conv.register_autograd(_depthwise_backward, setup_context=_depthwise_setup)


def depthwise_conv(x: Tensor, weight: Tensor, bias: Tensor, hw_shape: tuple[int, int],
                   num_prefix_tokens: int = 0) -> Tensor:
    """Depthwise ``k x k`` convolution (zero padding ``k // 2``, the same weights for every
    batch-head) of the grid tokens of ``x (..., p + H*W, d)``, in that layout: the same as
    ``nn.Conv2d(d, d, k, padding=k // 2, groups=d)`` on each ``(d, H, W)`` grid, prefix
    tokens zero. ``weight (d, 1, k, k)``, ``bias (d,)``. The output and ``x``'s gradient keep
    ``x``'s shape (no view of a reshaped tensor, which autograd could not add to in place)."""
    return torch.ops.lisa.depthwise_conv(x.contiguous(), weight, bias, *hw_shape, num_prefix_tokens)


@torch.library.custom_op('lisa::kernel_features', mutates_args=(), schema=(
    '(Tensor qkv, Tensor? pos, Tensor s, int heads, float p) -> (Tensor, Tensor, Tensor)'))
def _kernel_features(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int, p: float) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(CPU_KERNEL.features_forward(qkv, pos, s, heads, p))


@torch.library.custom_op('lisa::kernel_features_backward', mutates_args=(), schema=(
    '(Tensor gq, Tensor gk, Tensor gv, Tensor qkv, Tensor? pos, Tensor s, int heads, float p) -> (Tensor, Tensor)'))
def _kernel_features_backward(gq: Tensor, gk: Tensor, gv: Tensor, qkv: Tensor, pos: Tensor | None, s: Tensor,
                              heads: int, p: float) -> tuple[Tensor, Tensor]:
    return tuple(CPU_KERNEL.features_backward(gq, gk, gv, qkv, pos, s, heads, p))


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


def kernel_features(qkv: Tensor, pos: Tensor | None, s: Tensor, heads: int, p: float) -> tuple[Tensor, Tensor, Tensor]:
    """FLatten's focused ReLU features of :meth:`~.base.KernelAttention.features` in one pass:
    from ``qkv (B, N, 3C)`` (columns q, k, v), the positional encoding ``pos (1, N, C)`` added
    to k (or None) and ``s = softplus(scale) (C,)``, the ``(B, heads, N, C / heads)`` tensors

        q = f_p((relu(q) + 1e-6) / s),   k = f_p((relu(k + pos) + 1e-6) / s),   v

    (:func:`~.base.focus`), contiguous per head. Backward recomputes the features from ``qkv``
    (nothing token-sized is kept but ``qkv``)."""
    pos = pos.contiguous() if pos is not None else None
    return torch.ops.lisa.kernel_features(qkv.contiguous(), pos, s.contiguous(), heads, float(p))


@torch.library.custom_op('lisa::row_argmax', mutates_args=(), schema='(Tensor x) -> Tensor')
def _row_argmax(x: Tensor) -> Tensor:
    if available(WALK_KERNEL, x):
        return WALK_KERNEL.row_argmax(x.contiguous())
    return x.argmax(-1, keepdim=True)


@_row_argmax.register_fake
def _(x):
    return x.new_empty(x.shape[:-1] + (1,), dtype=torch.long)


def row_argmax(x: Tensor) -> Tensor:
    """``x.argmax(-1, keepdim=True)`` (the first index among equal maxima), by the fused kernel on
    the CPU: torch's argmax over rows of a head's width is ~10x slower than a pass over them."""
    return torch.ops.lisa.row_argmax(x)
