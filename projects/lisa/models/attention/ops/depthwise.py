"""The kernel attentions' depthwise convolution of the grid tokens, as one operator.

Backends (:mod:`.backend`, the table :data:`IMPLEMENTATIONS`): ``'reference'``
(:func:`depthwise_conv_reference`, ``F.conv2d``), ``'torch'`` (the same entry: ``F.conv2d`` is
already one tensor operation, no custom op of its own), ``'cpu_kernel'``
(``lisa::depthwise_conv``, ``depthwise_cpu.cpp``, channels-last on the tokens themselves:
mkldnn's depthwise backward is slow on the CPU; a fake implementation and an analytic backward
registered as its autograd).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .backend import choose, extension


def depthwise_conv(x: Tensor, weight: Tensor, bias: Tensor, hw_shape: Sequence[int], num_prefix_tokens: int = 0,
                   backend: str | None = None) -> Tensor:
    """Depthwise ``k x k`` convolution (zero padding ``k // 2``, the same weights for every
    batch-head) of the grid tokens of ``x (..., p + H*W, d)``, in that layout: the same as
    ``nn.Conv2d(d, d, k, padding=k // 2, groups=d)`` on each ``(d, H, W)`` grid, prefix
    tokens zero. ``weight (d, 1, k, k)``, ``bias (d,)``. The CPU kernel's output and ``x``'s
    gradient keep ``x``'s shape (no view of a reshaped tensor, which autograd could not add to in place)."""
    return choose(IMPLEMENTATIONS, backend, x, weight, bias)(x, weight, bias, hw_shape, num_prefix_tokens)


def depthwise_conv_reference(x: Tensor, weight: Tensor, bias: Tensor, hw_shape: Sequence[int],
                             num_prefix_tokens: int = 0) -> Tensor:
    """:func:`depthwise_conv` as its definition: ``F.conv2d`` on the ``(B h, d, H, W)`` grids."""
    *lead, n, d = x.shape
    p = num_prefix_tokens
    grid = x[..., p:, :].reshape(-1, *hw_shape, d).permute(0, 3, 1, 2)
    if torch.compiler.is_compiling():
        # Inductor (torch 2.14) cannot order the symbolic strides of a permuted view that a
        # graph with dynamic shapes saves for backward; eager keeps the view (no copy).
        grid = grid.contiguous()
    out = F.conv2d(grid, weight, bias, padding=weight.shape[-1] // 2, groups=d).permute(0, 2, 3, 1)
    out = out.reshape(*lead, n - p, d)
    return F.pad(out, (0, 0, p, 0)) if p else out


def _custom_op(x: Tensor, weight: Tensor, bias: Tensor, hw_shape: Sequence[int], num_prefix_tokens: int = 0) -> Tensor:
    """:func:`depthwise_conv` by the custom op ``lisa::depthwise_conv`` (the CPU kernel)."""
    return torch.ops.lisa.depthwise_conv(x.contiguous(), weight, bias, *hw_shape, num_prefix_tokens)


@torch.library.custom_op('lisa::depthwise_conv', mutates_args=(), schema=(
    '(Tensor x, Tensor weight, Tensor bias, SymInt h, SymInt w, int num_prefix_tokens) -> Tensor'))
def _depthwise_conv(x: Tensor, weight: Tensor, bias: Tensor, h: int, w: int, num_prefix_tokens: int) -> Tensor:
    return extension('depthwise').depthwise_forward(x, weight, bias, num_prefix_tokens, h, w)


@torch.library.custom_op('lisa::depthwise_conv_backward', mutates_args=(), schema=(
    '(Tensor grad, Tensor x, Tensor weight, SymInt h, SymInt w, int num_prefix_tokens) -> (Tensor, Tensor, Tensor)'))
def _depthwise_conv_backward(grad: Tensor, x: Tensor, weight: Tensor, h: int, w: int,
                             num_prefix_tokens: int) -> tuple[Tensor, Tensor, Tensor]:
    return tuple(extension('depthwise').depthwise_backward(grad, x, weight, num_prefix_tokens, h, w))


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

#: The depthwise convolution by backend (:mod:`.backend`), one signature, :func:`depthwise_conv`'s without
#: ``backend``.
IMPLEMENTATIONS = {'reference': depthwise_conv_reference, 'torch': depthwise_conv_reference, 'cpu_kernel': _custom_op}
