"""The exportable stand-ins of mmcv's detection ops (projects/lisa/deploy), eager and on onnxruntime,
against mmcv's own ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from projects.lisa.deploy import nms as deploy_nms

mmcv_ops = pytest.importorskip('mmcv.ops')
ort = pytest.importorskip('onnxruntime')


def random_boxes(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` boxes ``(x1, y1, x2, y2)`` in a 50 x 50 image, sides 1 to 21 (many overlaps), random scores."""
    xy = torch.rand(n, 2, generator=generator) * 50
    wh = torch.rand(n, 2, generator=generator) * 20 + 1
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=generator)


class Kept(nn.Module):
    """The boxes and scores that NMS keeps (a data-dependent count)."""

    def __init__(self, iou_threshold: float) -> None:
        super().__init__()
        self.iou_threshold = iou_threshold

    def forward(self, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = torch.ops.lisa.nms(boxes, scores, self.iou_threshold)
        return boxes[keep], scores[keep]


@pytest.mark.parametrize('iou_threshold', [0.3, 0.7])
def test_nms_keeps_what_mmcv_nms_keeps(iou_threshold):
    generator = torch.Generator().manual_seed(0)
    for n in (1, 40, 300):
        boxes, scores = random_boxes(n, generator)
        _, keep = mmcv_ops.nms(boxes, scores, iou_threshold)
        assert torch.equal(deploy_nms.nms(boxes, scores, iou_threshold), keep)


@pytest.mark.slow
def test_nms_exports_to_onnx_with_a_data_dependent_count_equal_to_mmcv():
    """One graph (N dynamic) on onnxruntime keeps mmcv's boxes, in mmcv's order, for other N and
    other counts than the traced ones. About 6 s (the export)."""
    generator = torch.Generator().manual_seed(1)
    boxes, scores = random_boxes(200, generator)
    dynamic = {'boxes': {0: torch.export.Dim.DYNAMIC}, 'scores': {0: torch.export.Dim.DYNAMIC}}
    program = torch.onnx.export(Kept(0.5).eval(), (boxes, scores), dynamo=True, dynamic_shapes=dynamic,
                                custom_translation_table=deploy_nms.TRANSLATIONS)
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=['CPUExecutionProvider'])
    counts = set()
    for n in (200, 57, 3):
        boxes, scores = random_boxes(n, generator)
        kept_boxes, kept_scores = session.run(None, {'boxes': boxes.numpy(), 'scores': scores.numpy()})
        dets, keep = mmcv_ops.nms(boxes, scores, 0.5)
        np.testing.assert_array_equal(kept_boxes, boxes[keep].numpy())
        np.testing.assert_array_equal(kept_scores, dets[:, 4].numpy())
        counts.add(len(keep))
    assert len(counts) == 3  # the count followed the data
