"""Non-maximum suppression as an exportable op, ``lisa::nms``, translated to ONNX ``NonMaxSuppression``.

mmcv's ``nms`` is a compiled op that ``torch.export`` cannot trace. ``lisa::nms`` computes the same
(torchvision's kernel: boxes ``(x1, y1, x2, y2)``, areas without mmcv's optional +1 offset, a box
suppressed by a kept one of higher score when their IoU exceeds the threshold, kept indices by
decreasing score). Its fake implementation returns a data-dependent number of indices, and
:data:`TRANSLATIONS` maps it to ONNX's ``NonMaxSuppression`` (same rule), so the exported graph
keeps a varying number of detections.
"""
from __future__ import annotations

import torch
import torchvision
from torch import Tensor

#: ``max_output_boxes_per_class`` of the ONNX node: no cap (as mmcv's nms).
NO_LIMIT = 2 ** 62


@torch.library.custom_op('lisa::nms', mutates_args=())
def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Indices ``(K,)`` of the boxes ``(N, 4)`` kept by greedy NMS, by decreasing ``scores (N,)``."""
    return torchvision.ops.nms(boxes, scores, iou_threshold)


@nms.register_fake
def _(boxes, scores, iou_threshold):
    return boxes.new_empty(torch.library.get_ctx().new_dynamic_size(), dtype=torch.long)


def nms_onnx(boxes, scores, iou_threshold: float):
    """ONNX translation of :func:`nms`: ``NonMaxSuppression`` on one batch and one class; its
    ``(K, 3)`` rows ``(batch, class, box)`` give the box indices."""
    from onnxscript import opset18 as op

    selected = op.NonMaxSuppression(op.Unsqueeze(boxes, [0]), op.Unsqueeze(scores, [0, 1]),
                                    op.Constant(value_ints=[NO_LIMIT]), op.Constant(value_floats=[iou_threshold]))
    return op.Reshape(op.Slice(selected, [2], [3], [1]), [-1])


#: ``custom_translation_table`` entries of ``torch.onnx.export`` for this module's ops.
TRANSLATIONS = {torch.ops.lisa.nms.default: nms_onnx}
