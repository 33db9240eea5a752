"""RoI Align as an exportable op, ``lisa::roi_align``, translated to ONNX ``RoiAlign``.

mmcv's ``RoIAlign`` is a compiled op that ``torch.export`` cannot trace. ``lisa::roi_align``
computes what mmcv's does with ``aligned=True``, ``pool_mode='avg'`` (Mask R-CNN's): for RoI
``(b, x1, y1, x2, y2)`` at ``spatial_scale`` s, the box ``s (x1, y1, x2, y2) - 0.5`` split into
``size x size`` bins, each the mean of ``ceil(bin side)`` x ``ceil(bin side)`` bilinear samples
of image ``b`` (``sampling_ratio=0``: adaptive). torchvision's kernel computes exactly that, and
ONNX's ``RoiAlign`` (opset >= 16, ``coordinate_transformation_mode='half_pixel'``) is the same
rule, so :data:`TRANSLATIONS` maps the op to it.
"""
from __future__ import annotations

import torch
import torchvision
from torch import Tensor

INT64 = 7  # onnx.TensorProto.INT64


@torch.library.custom_op('lisa::roi_align', mutates_args=())
def roi_align(features: Tensor, rois: Tensor, output_size: int, spatial_scale: float) -> Tensor:
    """``(K, C, size, size)`` features of the RoIs ``(K, 5)`` (batch index, x1, y1, x2, y2) in
    ``features (B, C, H, W)``: mmcv's ``RoIAlign(size, spatial_scale, 0, 'avg', aligned=True)``."""
    return torchvision.ops.roi_align(features, rois, output_size, spatial_scale, sampling_ratio=0, aligned=True)


@roi_align.register_fake
def _(features, rois, output_size, spatial_scale):
    return features.new_empty(rois.shape[0], features.shape[1], output_size, output_size)


def roi_align_onnx(features, rois, output_size: int, spatial_scale: float):
    """ONNX translation of :func:`roi_align`: ``RoiAlign`` with the batch indices split off the RoIs."""
    from onnxscript import opset18 as op

    batch = op.Cast(op.Reshape(op.Slice(rois, [0], [1], [1]), [-1]), to=INT64)
    return op.RoiAlign(features, op.Slice(rois, [1], [5], [1]), batch, coordinate_transformation_mode='half_pixel',
                       mode='avg', output_height=output_size, output_width=output_size, sampling_ratio=0,
                       spatial_scale=spatial_scale)


#: ``custom_translation_table`` entries of ``torch.onnx.export`` for this module's op.
TRANSLATIONS = {torch.ops.lisa.roi_align.default: roi_align_onnx}
