"""Mask R-CNN from the image to its detections, in operations ``torch.export`` and ONNX translate.

:class:`MaskRCNNDetections` runs the detector's own backbone, neck, RPN convolutions, box head
and mask head; only the glue between them, which mmdet writes with mmcv's compiled ops or with
size checks a traced graph cannot keep, is written here again for batch 1, with the same
arithmetic and the model's ``test_cfg``:

* :func:`decode_boxes`: mmdet's ``DeltaXYWHBBoxCoder.decode`` (whose export path imports an
  mmdet 2 module);
* :func:`batched_nms`: mmcv's ``batched_nms`` (the offset trick) over ``lisa::nms`` (:mod:`.nms`);
* :func:`roi_features`: mmdet's ``SingleRoIExtractor`` over ``lisa::roi_align`` (:mod:`.roi_align`).

Its outputs, in the frame of the (resized, padded) input, for a data-dependent number ``K`` of
detections: ``boxes (K, 4)``, ``scores (K,)``, ``labels (K,)`` and ``masks (K, 28, 28)``, the
mask head's probabilities for each detection's own class. :func:`paste_detections` takes them
to the original image as mmdet's test does (boxes divided by the scale factor, masks pasted
into the box and thresholded), outside the graph.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import nms as _nms  # registers lisa::nms
from . import roi_align as _roi_align  # registers lisa::roi_align

#: ``custom_translation_table`` of ``torch.onnx.export`` for the detector's graph.
TRANSLATIONS = {**_nms.TRANSLATIONS, **_roi_align.TRANSLATIONS}


def decode_boxes(priors: Tensor, deltas: Tensor, means: Sequence[float], stds: Sequence[float],
                 img_shape: Tensor, wh_ratio_clip: float = 16 / 1000) -> Tensor:
    """Boxes ``(N, 4)`` (x1, y1, x2, y2) from ``priors (N, 4)`` and ``deltas (N, 4)``, clipped to
    ``img_shape`` (h, w): mmdet's ``delta2bbox`` with ``clip_border=True``.

    With ``d = deltas * stds + means``, centre ``c = (p1 + p2) / 2`` and size ``s = p2 - p1`` of
    the prior: the box of centre ``c + s d_xy`` and size ``s exp(clamp(d_wh, +-|log wh_ratio_clip|))``.
    """
    d = deltas * deltas.new_tensor(stds) + deltas.new_tensor(means)
    centre = (priors[:, :2] + priors[:, 2:]) * 0.5
    size = priors[:, 2:] - priors[:, :2]
    max_ratio = abs(math.log(wh_ratio_clip))
    centre = centre + size * d[:, :2]
    size = size * d[:, 2:].clamp(min=-max_ratio, max=max_ratio).exp()
    boxes = torch.cat([centre - size * 0.5, centre + size * 0.5], dim=1)
    upper = img_shape.to(boxes.dtype)[[1, 0, 1, 0]]  # (w, h, w, h)
    return torch.minimum(boxes.clamp(min=0), upper)


def batched_nms(boxes: Tensor, scores: Tensor, groups: Tensor, iou_threshold: float) -> Tensor:
    """Indices, by decreasing score, of the boxes ``(N, 4)`` that NMS keeps within each group
    ``groups (N,)`` (class or FPN level): mmcv's ``batched_nms``, which shifts each group's
    boxes by ``group (max coordinate + 1)`` so that boxes of two groups never overlap, then runs
    one NMS. The boxes must be clipped to the image (non-negative), which lets an empty set take
    0 as its maximum. (mmcv runs one NMS per group instead from 10,000 boxes on, ``split_thr``:
    the same boxes kept unless the shift's rounding moves an IoU across the threshold.)"""
    top = torch.cat([boxes.flatten(), boxes.new_zeros(1)]).max()
    shifted = boxes + (groups.to(boxes) * (top + 1))[:, None]
    return torch.ops.lisa.nms(shifted, scores, iou_threshold)


def roi_features(feats: Sequence[Tensor], boxes: Tensor, extractor: nn.Module) -> Tensor:
    """``(K, C, size, size)`` features of the boxes ``(K, 4)``: mmdet's ``SingleRoIExtractor``.

    Box ``i`` is pooled from FPN level ``clamp(floor(log2(sqrt(w h) / finest_scale + 1e-6)), 0, L - 1)``
    by that level's RoI Align; every level pools every box and the box's own level is selected
    (no data-dependent split)."""
    rois = torch.cat([torch.zeros_like(boxes[:, :1]), boxes], dim=1)  # image 0
    levels = len(extractor.featmap_strides)
    scale = torch.sqrt((rois[:, 3] - rois[:, 1]) * (rois[:, 4] - rois[:, 2]))
    target = torch.floor(torch.log2(scale / extractor.finest_scale + 1e-6)).clamp(min=0, max=levels - 1).long()
    out = None
    for i, layer in enumerate(extractor.roi_layers[:levels]):
        pooled = torch.ops.lisa.roi_align(feats[i], rois, layer.output_size[0], layer.spatial_scale)
        out = pooled if out is None else torch.where((target == i)[:, None, None, None], pooled, out)
    return out


class MaskRCNNDetections(nn.Module):
    """An mmdet Mask R-CNN (``TwoStageDetector`` with ``RPNHead`` and a ``StandardRoIHead`` with
    masks) from ``input (1, 3, H, W)`` (normalised and padded, as the data preprocessor leaves it)
    and ``img_shape (2,)`` (the image's (h, w) inside the padding) to its detections (module
    docstring)."""

    input_names = ('input', 'img_shape')
    output_names = ('boxes', 'scores', 'labels', 'masks')

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        check_exportable(model)
        self.model = model
        self.rpn_cfg, self.rcnn_cfg = model.test_cfg.rpn, model.test_cfg.rcnn

    @staticmethod
    def example_inputs(x: Tensor) -> tuple[Tensor, Tensor]:
        """The inputs for an image batch ``x`` filling its whole padded size."""
        return x, torch.tensor(x.shape[2:])

    def forward(self, x: Tensor, img_shape: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if x.shape[0] != 1:
            raise ValueError(f'input batch of {x.shape[0]} images: the exported Mask R-CNN takes 1')
        feats = self.model.extract_feat(x)
        proposals = self.proposals(feats, img_shape)
        boxes, scores, labels = self.detections(feats, proposals, img_shape)
        return boxes, scores, labels, self.masks(feats, boxes, labels)

    def proposals(self, feats: Sequence[Tensor], img_shape: Tensor) -> Tensor:
        """RPNHead.predict_by_feat: per level the ``nms_pre`` best anchors (sorted even when a level
        has fewer, which NMS's own order makes no difference), decoded, boxes with both sides
        above ``min_bbox_size``, NMS within each level, the ``max_per_img`` best."""
        head, cfg = self.model.rpn_head, self.rpn_cfg
        cls_scores, bbox_preds = head(feats)
        priors = head.prior_generator.grid_priors([c.shape[-2:] for c in cls_scores], dtype=feats[0].dtype,
                                                  device=feats[0].device)
        nms_pre = cfg.get('nms_pre', -1)
        scores, deltas, anchors, levels = [], [], [], []
        for level, (cls_score, bbox_pred, prior) in enumerate(zip(cls_scores, bbox_preds, priors)):
            score = cls_score[0].permute(1, 2, 0).reshape(-1).sigmoid()  # (H W A,)
            delta = bbox_pred[0].permute(1, 2, 0).reshape(-1, 4)
            if nms_pre > 0:
                score, order = score.sort(descending=True)
                score, order = score[:nms_pre], order[:nms_pre]
                delta, prior = delta[order], prior[order]
            scores.append(score)
            deltas.append(delta)
            anchors.append(prior)
            levels.append(torch.full_like(score, level, dtype=torch.long))
        coder = head.bbox_coder
        boxes = decode_boxes(torch.cat(anchors), torch.cat(deltas), coder.means, coder.stds, img_shape)
        scores, levels = torch.cat(scores), torch.cat(levels)
        min_size = cfg.get('min_bbox_size', -1)
        if min_size >= 0:
            valid = (boxes[:, 2] - boxes[:, 0] > min_size) & (boxes[:, 3] - boxes[:, 1] > min_size)
            boxes, scores, levels = boxes[valid], scores[valid], levels[valid]
        keep = batched_nms(boxes, scores, levels, cfg.nms.iou_threshold)
        return boxes[keep][:cfg.max_per_img]

    def detections(self, feats: Sequence[Tensor], proposals: Tensor,
                   img_shape: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """StandardRoIHead.predict_bbox with multiclass_nms: class scores (softmax) and
        class-specific boxes of every proposal, pairs above ``score_thr``, NMS within each class,
        the ``max_per_img`` best."""
        roi_head, cfg = self.model.roi_head, self.rcnn_cfg
        head = roi_head.bbox_head
        extractor = roi_head.bbox_roi_extractor
        cls_score, bbox_pred = head(roi_features(feats[:extractor.num_inputs], proposals, extractor))
        scores = F.softmax(cls_score, dim=-1)[:, :-1]  # (K, classes): the last is the background
        classes = scores.shape[1]
        coder = head.bbox_coder
        boxes = decode_boxes(proposals.repeat_interleave(classes, dim=0), bbox_pred.reshape(-1, 4), coder.means,
                             coder.stds, img_shape)  # (K classes, 4), proposal-major as the scores
        labels = torch.arange(classes, device=scores.device).expand_as(scores).reshape(-1)
        scores = scores.reshape(-1)
        valid = scores > cfg.score_thr
        boxes, scores, labels = boxes[valid], scores[valid], labels[valid]
        keep = batched_nms(boxes, scores, labels, cfg.nms.iou_threshold)[:cfg.max_per_img]
        return boxes[keep], scores[keep], labels[keep]

    def masks(self, feats: Sequence[Tensor], boxes: Tensor, labels: Tensor) -> Tensor:
        """StandardRoIHead.predict_mask up to pasting: the mask head's ``(K, 28, 28)`` probabilities
        (sigmoid) of each box's own class."""
        roi_head = self.model.roi_head
        extractor = roi_head.bbox_roi_extractor if roi_head.share_roi_extractor else roi_head.mask_roi_extractor
        logits = roi_head.mask_head(roi_features(feats[:extractor.num_inputs], boxes, extractor))
        own = labels[:, None, None, None].expand(-1, 1, *logits.shape[2:])
        return logits.gather(1, own)[:, 0].sigmoid()


def check_exportable(model: nn.Module) -> None:
    """Raise ``ValueError`` naming the part of ``model`` that :class:`MaskRCNNDetections` does not
    reproduce (it covers mmdet's Mask R-CNN as configured here)."""
    from mmcv.ops import RoIAlign
    from mmdet.models.dense_heads import RPNHead
    from mmdet.models.roi_heads import StandardRoIHead
    from mmdet.models.roi_heads.roi_extractors import SingleRoIExtractor
    from mmdet.models.task_modules.coders import DeltaXYWHBBoxCoder

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f'{type(model).__name__}: {what}; the exported detector is a Mask R-CNN '
                             '(RPNHead, StandardRoIHead with a mask head, DeltaXYWHBBoxCoder, RoIAlign)')

    roi_head = getattr(model, 'roi_head', None)
    rpn_head = getattr(model, 'rpn_head', None)
    need(type(rpn_head) is RPNHead, f'rpn_head is {type(rpn_head).__name__}, not RPNHead')
    need(type(roi_head) is StandardRoIHead and roi_head.with_mask,
         f'roi_head is {type(roi_head).__name__}{"" if roi_head is None or roi_head.with_mask else " without masks"}, '
         'not a StandardRoIHead with a mask head')
    need(rpn_head.use_sigmoid_cls, 'the RPN scores by softmax, not sigmoid')
    for name, head in (('rpn_head', rpn_head), ('roi_head.bbox_head', roi_head.bbox_head)):
        coder = head.bbox_coder
        need(type(coder) is DeltaXYWHBBoxCoder and coder.clip_border and not coder.add_ctr_clamp,
             f'{name}.bbox_coder is {type(coder).__name__} (clip_border={getattr(coder, "clip_border", None)}, '
             f'add_ctr_clamp={getattr(coder, "add_ctr_clamp", None)}), not DeltaXYWHBBoxCoder(clip_border=True, '
             'add_ctr_clamp=False)')
    bbox_head = roi_head.bbox_head
    need(not bbox_head.reg_class_agnostic and not bbox_head.custom_cls_channels,
         'the box head regresses class-agnostic boxes or has custom class channels')
    need(not roi_head.mask_head.class_agnostic, 'the mask head is class-agnostic')
    extractors = [('bbox_roi_extractor', roi_head.bbox_roi_extractor)]
    if not roi_head.share_roi_extractor:
        extractors.append(('mask_roi_extractor', roi_head.mask_roi_extractor))
    for name, extractor in extractors:
        need(type(extractor) is SingleRoIExtractor, f'{name} is {type(extractor).__name__}, not SingleRoIExtractor')
        for layer in extractor.roi_layers:
            need(isinstance(layer, RoIAlign) and layer.aligned and layer.pool_mode == 'avg'
                 and layer.sampling_ratio == 0 and layer.output_size[0] == layer.output_size[1],
                 f'{name} pools with {layer}, not RoIAlign(aligned=True, pool_mode=avg, sampling_ratio=0, square)')
    for stage in ('rpn', 'rcnn'):
        nms_cfg = model.test_cfg[stage].nms
        need(nms_cfg.get('type', 'nms') == 'nms' and not nms_cfg.get('class_agnostic', False),
             f'test_cfg.{stage}.nms is {dict(nms_cfg)}, not plain per-class nms')


def paste_detections(boxes: Tensor, scores: Tensor, labels: Tensor, masks: Tensor, scale_factor: Sequence[float],
                     ori_shape: Sequence[int], mask_thr: float) -> dict[str, Tensor]:
    """The detections of :class:`MaskRCNNDetections` in the original image, as mmdet's test gives
    them (``FCNMaskHead._predict_by_feat_single`` with ``rescale=True`` on the CPU): boxes divided
    by ``scale_factor`` (w, h), each mask bilinearly pasted into its box over the
    ``ori_shape (h, w)`` image by mmdet's ``_do_paste_mask`` and thresholded at ``mask_thr``
    (``bboxes, scores, labels, masks (K, h, w)`` bool)."""
    from mmdet.models.roi_heads.mask_heads.fcn_mask_head import _do_paste_mask

    boxes = boxes / boxes.new_tensor(scale_factor).repeat(2)
    h, w = ori_shape[:2]
    pasted = torch.zeros(len(boxes), h, w, dtype=torch.bool)
    for i in range(len(boxes)):
        mask, where = _do_paste_mask(masks[i, None, None], boxes[i, None], h, w, skip_empty=True)
        pasted[(slice(i, i + 1), ) + where] = mask >= mask_thr
    return dict(bboxes=boxes, scores=scores, labels=labels, masks=pasted)
