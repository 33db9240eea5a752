"""Rewrites of OpenMMLab layers whose traced graph would hold the traced input's sizes as constants.

``torch.export`` with a dynamic height and width records ``int(size * factor)`` and adaptive
pooling's kernel as constants of the traced input: at another size the graph silently computes
something else. Each rewrite replaces a layer's ``forward`` by the same computation with the sizes
kept symbolic (same values eagerly). :func:`gemm_linears` likewise gives ``nn.Linear`` the form that
onnxruntime runs as one ``Gemm``.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.utils import _pair


def symbolic_upsampling(model: nn.Module) -> None:
    """Make mmseg's ``Upsample`` (the Semantic FPN head's scale heads) keep the size symbolic.

    It computes its output size as ``int(t * scale_factor)``, which torch.export records as the
    constant of the traced input: at any other input size the upsampled maps would come out
    at the traced size (and be resized back, silently wrong). For an integer factor,
    ``F.interpolate(scale_factor=...)`` gives the same size and the same values.
    """
    from mmseg.models.utils import Upsample

    for m in model.modules():
        if isinstance(m, Upsample) and not m.size and float(m.scale_factor).is_integer():
            m.forward = functools.partial(F.interpolate, scale_factor=m.scale_factor, mode=m.mode,
                                          align_corners=m.align_corners)


def pooling_matrix(out_size: int, in_size, like: Tensor) -> Tensor:
    """``(out_size, in_size)`` averaging weights of adaptive average pooling: bin ``i`` averages
    inputs ``floor(i n / o) <= j < ceil((i + 1) n / o)``, as ``F.adaptive_avg_pool1d`` does."""
    i = torch.arange(out_size, device=like.device)[:, None]
    j = torch.arange(in_size, device=like.device)[None]
    inside = ((j >= i * in_size // out_size) & (j < ((i + 1) * in_size + out_size - 1) // out_size)).to(like.dtype)
    return inside / inside.sum(1, keepdim=True)


def symbolic_adaptive_pooling(model: nn.Module) -> None:
    """Make ``nn.AdaptiveAvgPool2d`` (UperNet's pyramid pooling) follow the input size.

    The exporter turns adaptive pooling into a fixed ``AveragePool`` whose kernel and stride are
    those of the traced input, wrong at any other size. The same means as two matrix products,
    ``P_h x P_w^T`` with :func:`pooling_matrix`, keep the sizes symbolic.
    """
    def pool(x: Tensor, size: tuple[int, int]) -> Tensor:
        return pooling_matrix(size[0], x.shape[-2], x) @ x @ pooling_matrix(size[1], x.shape[-1], x).T

    for m in model.modules():
        if isinstance(m, nn.AdaptiveAvgPool2d):
            size = _pair(m.output_size)
            if None in size:
                raise ValueError(f'{m}: output_size None (keep the input size) is not translated here')
            m.forward = functools.partial(pool, size=size)


def linear_on_rows(module: nn.Linear, x: Tensor) -> Tensor:
    """``module(x)`` with the leading dimensions of ``x`` flattened: a 2-D ``F.linear``, which exports as one
    ``Gemm`` (bias included) where ``(B, N, C)`` tokens export as a ``MatMul`` and a separate bias ``Add``."""
    out = F.linear(x.reshape(-1, x.shape[-1]), module.weight, module.bias)
    return out.view(*x.shape[:-1], out.shape[-1])


def gemm_linears(model: nn.Module) -> None:
    """Make every ``nn.Linear`` of ``model`` export as one ``Gemm`` (:func:`linear_on_rows`; the same values):
    onnxruntime adds the bias of a batched ``MatMul`` in a pass of its own over the output."""
    for m in model.modules():
        if type(m) is nn.Linear:
            m.forward = functools.partial(linear_on_rows, m)
