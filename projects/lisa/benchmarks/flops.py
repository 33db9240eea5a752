"""FLOPs and parameters of a model or a config, in the paper's counting convention.

The convention of LiSA's Tables 3-4: MMEngine's jit-trace
:class:`~mmengine.analysis.FlopAnalyzer`, one multiply-add counted as one FLOP;
matrix products (``linear``, ``matmul``, ``bmm``, ``einsum``), convolutions,
norms and upsampling are counted, element-wise operations are not.
Segmentation is measured at a 2048x512 input, detection at 1280x800
(:data:`PAPER_INPUT_HW`), through the network forward as the mm ``get_flops``
tools trace it. Counted so, the mm packages' own softmax baselines reproduce the
paper's baseline rows (:data:`~projects.lisa.analysis.paper.PAPER_GFLOPS`; ``docs/flops.md``, written by
``tools/get_flops.py``).

The analyzer sees three operations of our models only as names, so this
module adds a handle for each (:data:`FLOP_HANDLES`):

* ``aten::scaled_dot_product_attention`` (:class:`SoftmaxAttention`): the two
  products ``Q K^T`` and ``A V``, ``B h n m (d + dv)`` -- what mmdet's PVT (two
  ``bmm`` of ``nn.MultiheadAttention``) and Swin (two ``matmul``) count;
* LiSA's walk (the custom op ``lisa::random_walk``, one opaque node in a
  trace): every product of Eq. 8 as the forward performs it
  (:func:`walk_flop_jit`);
* LiSA's local branch (``lisa::neighbourhood``, or ``lisa::neighbourhood_fused``
  with the fused CPU kernel): ``Q K^T`` and ``A V`` restricted to each token's
  window (:func:`neighbourhood_flop_jit`).

The token projections and the step MLP are ordinary ``linear`` ops and counted
as such; the fused CPU depthwise convolution (``lisa::depthwise_conv``) is counted
as the ``conv`` it computes and the fused kernel features (``lisa::kernel_features``)
as the element-wise operations they are (0), so the fast and the reference paths
count the same.
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import MODELS, init_default_scope
from torch import nn

#: Input (H, W) of the paper's FLOPs per OpenMMLab scope.
PAPER_INPUT_HW = {'mmseg': (512, 2048), 'mmdet': (800, 1280)}


def _batch(shape: Sequence[int]) -> int:
    return math.prod(shape[:-2])


def sdpa_flop_jit(inputs: list, outputs: list) -> int:
    """``scaled_dot_product_attention(q (.., n, d), k (.., m, d), v (.., m, dv))``:
    ``Q K^T`` and ``A V``, ``n m d + n m dv`` per batch and head."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    return _batch(q) * q[-2] * k[-2] * (q[-1] + v[-1])


def walk_flop_jit(inputs: list, outputs: list) -> Counter:
    """LiSA's truncated walk ``sum_k w_k S^k V`` (``lisa::random_walk``), per batch and head::

        row sums  Q mu                n d        (Q~ = diag(Q K^T 1)^-1 Q, mu = mean of K)
        A = K^T Q~,  M_1 = K^T V      n d d + n d dv
        M_k = A M_(k-1), k = 2..T-1   (T - 2) d d dv
        read-out  Q~ M_k              n d dv     (fixed weights, folded into one d x dv matrix)
                                      (T - 1) n d dv  (per-token weights of Eq. 10)

    ``inputs``: ``q, k (B, h, n, d)``, ``v (B, h, n, dv)``, ``weights (.., T)``
    whose token axis is 1 for fixed weights.
    """
    q, _, v, w = (get_shape(x) for x in inputs[:4])
    n, d, dv, steps = q[-2], q[-1], v[-1], w[-1]
    read_out = n * d * dv * (steps - 1 if w[-2] > 1 else 1)
    flops = n * d + n * d * d + n * d * dv + (steps - 2) * d * d * dv + read_out
    return Counter(random_walk=_batch(q) * flops)


def window_pairs(hw_shape: Sequence[int], kernel_size: int) -> int:
    """Number of (token, neighbour) pairs of ``kernel_size``-windows on an ``(H, W)``
    grid, clipped at the border: ``sum_dy (H - |dy|) * sum_dx (W - |dx|)``."""
    r = kernel_size // 2
    return math.prod(sum(max(0, s - abs(o)) for o in range(-r, r + 1)) for s in hw_shape)


def neighbourhood_flop_jit(inputs: list, outputs: list, window_dims: tuple[int, int, int]) -> Counter:
    """LiSA's local branch (either custom op of ``models.attention.ops.neighbourhood``): ``Q K^T`` and ``A V`` over the
    window pairs of the grid, ``pairs (d + dv)`` per batch and head; the prefix tokens,
    which keep their own value, cost nothing.

    ``inputs``: ``q, k (..., p + H*W, d)``, ``v (..., p + H*W, dv)``, ...; the second
    output, the attention weights, holds ``H, W`` and ``k*k`` at ``window_dims``.
    """
    q, _, v = (get_shape(x) for x in inputs[:3])
    h, w, kk = (get_shape(outputs[1])[i] for i in window_dims)
    flops = window_pairs((h, w), math.isqrt(kk)) * (q[-1] + v[-1])
    return Counter(neighbourhood_attention=_batch(q) * flops)


def depthwise_flop_jit(inputs: list, outputs: list) -> Counter:
    """``lisa::depthwise_conv(x (..., p + H*W, d), weight (d, 1, k, k), bias, H, W, p)``: what the
    analyzer counts for the ``nn.Conv2d(d, d, k, groups=d)`` it computes, ``BH H W d k^2``."""
    x, weight = get_shape(inputs[0]), get_shape(inputs[1])
    h, w = (inputs[i].toIValue() for i in (3, 4))
    return Counter(conv=_batch(x) * h * w * x[-1] * weight[-2] * weight[-1])


FLOP_HANDLES = {
    'aten::scaled_dot_product_attention': sdpa_flop_jit,
    'lisa::depthwise_conv': depthwise_flop_jit,
    'lisa::kernel_features': lambda inputs, outputs: Counter(),  # ReLU, scaling, focusing: element-wise
    'lisa::random_walk': walk_flop_jit,
    'lisa::neighbourhood': functools.partial(neighbourhood_flop_jit, window_dims=(2, 3, 1)),  # (BH, k*k, H, W)
    'lisa::neighbourhood_fused': functools.partial(neighbourhood_flop_jit, window_dims=(1, 2, 3)),  # (BH, H, W, k*k)
}


@dataclass
class Complexity:
    """FLOPs (multiply-adds) and parameters of one model at one input."""
    flops: int
    params: int
    input_hw: tuple[int, int] | None = None
    by_operator: Counter = field(default_factory=Counter)
    uncounted: Counter = field(default_factory=Counter)  # op kinds seen but not counted


def flop_analyzer(model: nn.Module, inputs: tuple) -> FlopAnalyzer:
    """MMEngine's analyzer with :data:`FLOP_HANDLES`, warnings off (see ``uncounted``)."""
    analyzer = FlopAnalyzer(model, inputs).set_op_handle(**FLOP_HANDLES)
    return analyzer.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings('none')


def model_complexity(model: nn.Module, inputs: tuple, input_hw: tuple[int, int] | None = None) -> Complexity:
    """Count ``model(*inputs)`` (one jit trace, no gradients).

    Raises if the trace holds a custom op of this project (``lisa::``) that has
    no handle: its products would silently count as zero.
    """
    analyzer = flop_analyzer(model, inputs)
    with torch.no_grad():
        flops = analyzer.total()
    uncounted = analyzer.unsupported_ops()
    missing = sorted(op for op in uncounted if op.startswith('lisa::'))
    if missing:
        raise RuntimeError(f'no FLOP handle for {missing}; add one to FLOP_HANDLES')
    return Complexity(flops, parameter_count(model)[''], input_hw, Counter(analyzer.by_operator()), uncounted)


class _TensorMode(nn.Module):
    """``model(inputs, data_samples, mode='tensor')``: an OpenMMLab model's network
    forward without post-processing, as the mm ``get_flops`` tools trace it."""

    def __init__(self, model: nn.Module, data_samples: Any) -> None:
        super().__init__()
        self.model, self.data_samples = model, data_samples

    def forward(self, inputs: torch.Tensor) -> Any:
        return self.model(inputs, self.data_samples, mode='tensor')


def backbone_input_hw(cfg: Config) -> tuple[int, int]:
    """The backbone's ``img_size`` (or ``pretrain_img_size``), else 224, as ``(H, W)``."""
    backbone = cfg.model.get('backbone', {})
    size = backbone.get('img_size', backbone.get('pretrain_img_size', 224))
    return (size, size) if isinstance(size, int) else tuple(size)


def default_input_hw(cfg: Config) -> tuple[int, int]:
    """The paper's input for segmentation and detection, else :func:`backbone_input_hw`."""
    return PAPER_INPUT_HW.get(cfg.get('default_scope')) or backbone_input_hw(cfg)


def _data_sample(scope: str, hw: tuple[int, int]) -> Any:
    meta = dict(ori_shape=hw, img_shape=hw, pad_shape=hw, scale_factor=(1.0, 1.0))
    if scope == 'mmseg':
        from mmseg.structures import SegDataSample
        return SegDataSample(metainfo=meta)
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample
        return DetDataSample(metainfo=meta)
    return None


def config_complexity(config: str | Path | Config, input_hw: Sequence[int] | None = None,
                      seed: int = 0) -> Complexity:
    """FLOPs and parameters of the model of an mmseg / mmdet / mmpretrain config.

    As the mm ``get_flops`` tools do: the model is built without loading weights,
    SyncBN reverted, in eval mode; a random image of ``input_hw`` (default
    :func:`default_input_hw`) goes through the data preprocessor and the network
    forward (``mode='tensor'``: backbone, neck, heads; for detectors the RPN
    proposals and the RoI heads, for segmentors the decode head -- not the
    training-only auxiliary head, whose parameters are counted, as the Swin
    paper's 60M / 945G). The seed fixes the weights and so the number of RPN
    proposals a detector keeps.
    """
    cfg = config if isinstance(config, Config) else Config.fromfile(str(config))
    scope = cfg.get('default_scope')
    if scope not in ('mmseg', 'mmdet', 'mmpretrain'):
        raise ValueError(f"config default_scope={scope!r}; expected 'mmseg', 'mmdet' or 'mmpretrain'")
    hw = tuple(input_hw) if input_hw is not None else default_input_hw(cfg)
    if len(hw) != 2 or min(hw) < 1:
        raise ValueError(f'input_hw={input_hw} must be two positive ints (H, W)')
    init_default_scope(scope)
    torch.manual_seed(seed)
    model = revert_sync_batchnorm(MODELS.build(cfg.model)).eval()
    sample = _data_sample(scope, hw)
    data = model.data_preprocessor(dict(
        inputs=[torch.randint(0, 256, (3, *hw), dtype=torch.uint8)],
        data_samples=None if sample is None else [sample]), False)
    return model_complexity(_TensorMode(model, data['data_samples']), (data['inputs'],), hw)
