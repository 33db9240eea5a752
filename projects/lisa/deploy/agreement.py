"""onnxruntime's Mask R-CNN detections against mmdet's own eager test, image by image.

The exported graph (:class:`.detector.MaskRCNNDetections`) and ``model.test_step`` see the same
preprocessed image; the graph's detections are pasted into the original image by
:func:`.detector.paste_detections`, as the test pastes its own. They agree when, on every
image,

* the two give the same number of detections, matched one to one (same label, greedily by box
  IoU in eager's score order: :func:`agreement`);
* every matched pair has box IoU >= 0.99, scores within 1e-3 and pasted-mask IoU >= 0.98;

and mmdet's ``CocoMetric`` box and mask mAP of the two (:func:`average_precision`) are within
0.1 AP points (1e-3 of mAP in [0, 1]).

Near-ties. float32 rounding differs between eager and onnxruntime (other summation orders): the
backbones' outputs differ by ~1e-5 relative. Where an image's detections are decided by a near-tie
(two proposals at NMS's IoU threshold, scores equal to the top-k cut), a change of that size flips
a discrete choice (also a box on an FPN level boundary, ``sqrt(w h) / finest_scale`` at a power of 2,
is then pooled from the next level), and eager itself gives other detections under it. Such an
image is compared with eager's test under :data:`TIE_DRAWS` perturbations of that size
(:func:`perturbed_tests`): the graph agrees when it gives one of eager's outcomes, as a whole (a
count decided by a tie) or detection by detection (ties flip independently: a draw may flip one
and not another). Each detection held to a perturbed test is counted as a near-tie (``near_ties``
in :func:`summary`), and a comparison where more than half of the detections are near-ties fails
(it would hold little). :data:`THRESHOLDS` holds these bounds and
:func:`failures` names each one broken. :func:`make_confident` is what makes a detector with
random weights detect something, so that a comparison of it holds detections.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from .detector import MaskRCNNDetections, paste_detections

#: The bounds of an agreement: box IoU, score difference, mask IoU of matched detections; AP difference.
THRESHOLDS = dict(min_iou=0.99, max_score_diff=1e-3, min_mask_iou=0.98, max_ap_diff=1e-3)
#: Perturbations of :func:`perturbed_tests`: draws, and their standard deviation relative to the RMS of
#: each backbone output (the eager-onnxruntime difference of the LiSA-PVT-T backbone is 1e-5 to 3e-5
#: absolute on outputs of RMS ~1).
TIE_DRAWS, TIE_NOISE = 8, 1e-5


def detection_loader(config: str | Path, data_root: str | Path | None = None, scale: float = 1.0,
                     images: int | None = None):
    """The config's test dataloader, one image per batch and no worker processes: on the COCO set
    at ``data_root`` (``annotations/instances_val2017.json``, ``val2017/``) if given, the test
    pipeline's ``Resize`` scale times ``scale`` (rounded), its first ``images`` images if given."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    cfg = Config.fromfile(str(config))
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    dataset = cfg.test_dataloader.dataset
    if data_root is not None:
        dataset.update(data_root=f'{data_root}/', ann_file='annotations/instances_val2017.json',
                       data_prefix=dict(img='val2017/'))
    if scale != 1:
        pipeline = [dict(t) for t in dataset.pipeline]
        for t in pipeline:
            if t['type'] == 'Resize':
                t['scale'] = tuple(round(s * scale) for s in t['scale'])
        dataset.pipeline = pipeline
    if images is not None:
        dataset.indices = images
    loader = dict(cfg.test_dataloader, batch_size=1, num_workers=0, persistent_workers=False, dataset=dataset)
    return Runner.build_dataloader(loader)


def resize_scale(loader) -> tuple[int, int]:
    """The ``(w, h)`` scale of the ``Resize`` in the loader's pipeline."""
    return next(tuple(t.scale) for t in loader.dataset.pipeline.transforms if type(t).__name__ == 'Resize')


def make_confident(wrapped: MaskRCNNDetections, classes: Iterable[int]) -> None:
    """Make a Mask R-CNN with random weights detect ``classes``: its box classifier's weights
    x10 and those classes' biases +3 (scores spread over 0.1-0.7, so that up to ``max_per_img``
    boxes pass ``score_thr``), box and RPN regressions x30 (boxes moved off the proposals, and
    proposals off the anchors, whose IoUs on a grid can sit at NMS's threshold) and mask logits
    x30 (away from 0, where float rounding flips pixels of a pasted mask)."""
    model = wrapped.model
    head = model.roi_head.bbox_head
    with torch.no_grad():
        head.fc_cls.weight.mul_(10)
        head.fc_cls.bias[list(classes)] += 3
        head.fc_reg.weight.mul_(30)
        model.rpn_head.rpn_reg.weight.mul_(30)
        model.roi_head.mask_head.conv_logits.weight.mul_(30)


def drawn_classes(loader) -> list[int]:
    """The labels of the classes that the generated COCO images draw (:data:`COCO_LOOKS`)."""
    from projects.lisa.synthetic.synthetic import COCO_LOOKS

    return [loader.dataset.cat2label[c] for c in COCO_LOOKS]


def both_detections(wrapped: MaskRCNNDetections, session, loader) -> list[tuple]:
    """Per image ``(eager, onnx, batch)``: mmdet's own test (``model.test_step``, a
    ``DetDataSample``) and the ONNX graph's detections on the same preprocessed input, pasted by
    :func:`.detector.paste_detections` (a dict as :func:`paste_detections` gives), with the batch."""
    model = wrapped.model
    pairs = []
    for batch in loader:
        with torch.no_grad():
            eager = model.test_step(batch)[0]
            data = model.data_preprocessor(batch, False)
        meta = data['data_samples'][0].metainfo
        outs = session.run(None, {'input': data['inputs'].numpy(), 'img_shape': np.array(meta['img_shape'])})
        onnx = paste_detections(*map(torch.from_numpy, outs), meta['scale_factor'], meta['ori_shape'],
                                model.test_cfg.rcnn.mask_thr_binary)
        pairs.append((reference(model, batch, eager, onnx), onnx, batch))
    return pairs


def perturbed_tests(model, batch, draws: int = TIE_DRAWS, noise: float = TIE_NOISE) -> Iterator:
    """mmdet's test of ``batch``, ``draws`` times, each backbone output ``x`` plus Gaussian noise of
    standard deviation ``noise * rms(x)`` (seeded by the draw): the detections that float32 rounding
    of the size seen between eager and onnxruntime may give as well. Each carries ``near_ties`` (all
    its detections) in its metainfo."""
    generator = torch.Generator()

    def perturb(module, inputs, outputs):
        return type(outputs)(x + torch.randn(x.shape, generator=generator) * noise * x.pow(2).mean().sqrt()
                             for x in outputs)

    for draw in range(draws):
        generator.manual_seed(draw)
        handle = model.backbone.register_forward_hook(perturb)
        try:
            with torch.no_grad():
                sample = model.test_step(batch)[0]
        finally:
            handle.remove()
        sample.set_metainfo(dict(near_ties=len(sample.pred_instances)))
        yield sample


def _holds(sample, onnx: dict) -> bool:
    return not failures(dict(summary([agreement(sample, onnx)]), near_ties=0))


def reference(model, batch, eager, onnx: dict):
    """The eager test that the graph's detections ``onnx`` are held to: ``eager`` where they agree
    with it (:func:`agreement`, :func:`failures`); else the first of eager's :func:`perturbed_tests`
    that they agree with as a whole; else, with eager's count, ``eager`` with each detection that
    breaks a bound replaced by the first perturbed test's detection (same label, the largest box IoU
    with the graph's) that keeps them (``near_ties`` in the metainfo counts those); else ``eager``."""
    if _holds(eager, onnx):
        return eager
    tests = []
    for test in perturbed_tests(model, batch):
        if _holds(test, onnx):
            return test
        tests.append(test)
    ref = eager.pred_instances
    if not len(ref) or len(ref) != len(onnx['bboxes']):
        return eager
    rows, replaced = [], 0
    for i, j, _ in _matches(ref, onnx):
        graph = {k: v[j:j + 1] for k, v in onnx.items()}
        row = ref[i:i + 1]
        if not _holds(_sample(eager, row), graph):
            found = (test.pred_instances[k:k + 1] for test in tests for k in _best(test.pred_instances, graph))
            swap = next((f for f in found if _holds(_sample(eager, f), graph)), None)
            if swap is not None:
                row, replaced = swap, replaced + 1
        rows.append(row)
    return _sample(eager, type(ref).cat(rows), near_ties=replaced)


def _sample(like, instances, **metainfo):
    """A ``DetDataSample`` with ``like``'s metainfo (and ``metainfo``) and ``instances``."""
    return type(like)(metainfo={**like.metainfo, **metainfo}, pred_instances=instances)


def _best(instances, graph: dict) -> list[int]:
    """The index of the detection among ``instances`` with the graph's one label and the largest box
    IoU with its box (none if that label is absent)."""
    from mmdet.structures.bbox import bbox_overlaps

    same = torch.where(instances.labels == graph['labels'][0])[0]
    return [int(same[bbox_overlaps(instances.bboxes[same], graph['bboxes'])[:, 0].argmax()])] if len(same) else []


def _matches(ref, onnx: dict) -> list[tuple[int, int, float]]:
    """Eager's detections ``ref`` matched one to one with the graph's (equal counts): same label,
    greedily by box IoU in eager's score order, as ``(eager, graph, box IoU)``; the IoU is 0 where
    no detection of the label is left."""
    from mmdet.structures.bbox import bbox_overlaps

    iou = bbox_overlaps(ref.bboxes, onnx['bboxes']) * (ref.labels[:, None] == onnx['labels'][None])
    free = torch.ones(len(ref), dtype=torch.bool)
    pairs = []
    for i in range(len(ref)):
        j = int(torch.where(free, iou[i], -1.0).argmax())
        free[j] = False
        pairs.append((i, j, float(iou[i, j])))
    return pairs


def agreement(eager, onnx: dict) -> dict:
    """Counts ``(eager, onnx)``, then over detections matched one to one (:func:`_matches`): the
    smallest box IoU, largest score difference and smallest mask IoU (1, 0, 1 when nothing is
    matched: with different counts nothing is); ``near_ties``: how many of eager's detections come
    from :func:`perturbed_tests` (its metainfo's, as :func:`reference` counts them)."""
    ref = eager.pred_instances
    result = dict(count=(len(ref), len(onnx['bboxes'])), min_iou=1.0, max_score_diff=0.0, min_mask_iou=1.0,
                  near_ties=eager.metainfo.get('near_ties', 0))
    if not len(ref) or len(ref) != len(onnx['bboxes']):
        return result
    for i, j, iou in _matches(ref, onnx):
        a, b = ref.masks[i], onnx['masks'][j]
        union = int((a | b).sum())
        result['min_iou'] = min(result['min_iou'], iou)
        result['max_score_diff'] = max(result['max_score_diff'], float((ref.scores[i] - onnx['scores'][j]).abs()))
        result['min_mask_iou'] = min(result['min_mask_iou'], int((a & b).sum()) / union if union else 1.0)
    return result


def summary(found: Sequence[dict]) -> dict:
    """The agreements of several images (:func:`agreement`) as one: images, total detections of
    each side, images whose counts differ, and the extremes over all matched detections."""
    return dict(images=len(found), eager=sum(a['count'][0] for a in found), onnx=sum(a['count'][1] for a in found),
                count_mismatches=sum(a['count'][0] != a['count'][1] for a in found),
                near_ties=sum(a['near_ties'] for a in found),
                min_iou=min((a['min_iou'] for a in found), default=1.0),
                max_score_diff=max((a['max_score_diff'] for a in found), default=0.0),
                min_mask_iou=min((a['min_mask_iou'] for a in found), default=1.0))


def failures(total: dict, ap: dict[str, tuple[float, float]] | None = None) -> list[str]:
    """Each bound of :data:`THRESHOLDS` that the :func:`summary` ``total`` (and the
    :func:`average_precision` ``ap``, if given) breaks, in words; a comparison without any
    detection is one too (it would hold nothing)."""
    bounds = THRESHOLDS
    found = []
    if total['count_mismatches']:
        found.append(f"{total['count_mismatches']} of {total['images']} images with different detection counts "
                     f"(eager {total['eager']}, onnxruntime {total['onnx']} in all)")
    if not total['eager']:
        found.append('no detection: the comparison holds nothing')
    if 2 * total['near_ties'] > total['eager']:
        found.append(f"{total['near_ties']} of {total['eager']} detections held to eager's perturbed tests "
                     '(near-ties): more than half')
    if total['min_iou'] < bounds['min_iou']:
        found.append(f"box IoU {total['min_iou']:.4f} < {bounds['min_iou']}")
    if total['max_score_diff'] > bounds['max_score_diff']:
        found.append(f"score difference {total['max_score_diff']:.2e} > {bounds['max_score_diff']:g}")
    if total['min_mask_iou'] < bounds['min_mask_iou']:
        found.append(f"mask IoU {total['min_mask_iou']:.4f} < {bounds['min_mask_iou']}")
    for kind, (eager, onnx) in (ap or {}).items():
        if not abs(eager - onnx) <= bounds['max_ap_diff']:
            found.append(f'{kind} mAP {onnx:.3f} (onnxruntime) vs {eager:.3f} (eager): '
                         f"more than {bounds['max_ap_diff']:g} apart")
    return found


def average_precision(pairs: Sequence[tuple], loader) -> dict[str, tuple[float, float]]:
    """mmdet's ``CocoMetric`` box and mask mAP (in [0, 1]) of eager's detections and of the ONNX
    graph's: ``{'bbox': (eager, onnx), 'segm': (eager, onnx)}``."""
    from mmdet.evaluation import CocoMetric
    from mmdet.structures import DetDataSample
    from mmengine.evaluator import Evaluator
    from mmengine.structures import InstanceData

    ann_file = loader.dataset.ann_file  # joined to data_root by the dataset
    found = {}
    for source in ('eager', 'onnx'):
        evaluator = Evaluator(CocoMetric(ann_file=ann_file, metric=['bbox', 'segm']))
        evaluator.dataset_meta = loader.dataset.metainfo
        for eager, onnx, batch in pairs:
            if source == 'onnx':
                eager = DetDataSample(metainfo=eager.metainfo, pred_instances=InstanceData(**onnx))
            evaluator.process([eager], batch)
        found[source] = evaluator.evaluate(len(pairs))
    return {k: (found['eager'][f'coco/{k}_mAP'], found['onnx'][f'coco/{k}_mAP']) for k in ('bbox', 'segm')}


def compare(wrapped: MaskRCNNDetections, session, loader, ap: bool = True) -> dict:
    """:func:`both_detections` on the loader's images, their :func:`summary` (with the mAPs of
    :func:`average_precision` under ``'ap'`` if ``ap``) and its :func:`failures` under ``'failures'``."""
    pairs = both_detections(wrapped, session, loader)
    total = summary([agreement(eager, onnx) for eager, onnx, _ in pairs])
    if ap:
        total['ap'] = average_precision(pairs, loader)
    total['failures'] = failures(total, total.get('ap'))
    return total


__all__ = ['THRESHOLDS', 'agreement', 'average_precision', 'both_detections', 'compare', 'detection_loader',
           'drawn_classes', 'failures', 'make_confident', 'perturbed_tests', 'reference', 'resize_scale', 'summary']
