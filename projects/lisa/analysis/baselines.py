"""Chance baselines of the demo's generated validation sets, and the judgement of a stage against one.

Each baseline is a predictor that looks at the training labels only, scored by the metric the
stage's ``mim test`` reports (percent):

- classification top-1: always the most frequent training class (1 / K on a balanced set of K);
- segmentation mIoU / mAcc: that class at every pixel, scored as mmseg's ``IoUMetric``;
- detection box AP: boxes at random places, with sizes and classes drawn from the training boxes,
  scored by pycocotools' ``COCOeval`` (the evaluator of mmdet's ``CocoMetric``).

A stage clears its baseline when ``metric >= max(FACTOR * baseline, baseline + MARGIN)``
(:class:`Judged`); :func:`judge_test` reads a stage's metric from its ``mim test`` result.
"""
from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .results import read_work_dir

FACTOR = 2.0
MARGIN = 10.0  # percentage points
IMAGE_SUFFIXES = ('.jpeg', '.jpg', '.png')


def majority_accuracy(train_labels: list, val_labels: list) -> float:
    """Top-1 (%) on ``val_labels`` of always predicting the most frequent of ``train_labels``.

    Ties go to the label counted first, as ``Counter.most_common`` orders them.
    """
    if not train_labels or not val_labels:
        raise ValueError(f'need training and validation labels, got {len(train_labels)} and {len(val_labels)}')
    majority = Counter(train_labels).most_common(1)[0][0]
    return 100.0 * sum(label == majority for label in val_labels) / len(val_labels)


def folder_labels(split_dir: str | Path) -> list[str]:
    """One class name per image of a folder-per-class split (mmpretrain's ``CustomDataset`` layout)."""
    split_dir = Path(split_dir)
    labels = [p.parent.name for p in sorted(split_dir.glob('*/*')) if p.suffix.lower() in IMAGE_SUFFIXES]
    if not labels:
        raise FileNotFoundError(f'no images in class folders under {split_dir}')
    return labels


def classification_baseline(data_root: str | Path) -> float:
    """:func:`majority_accuracy` of the ``train`` and ``val`` folders of an ImageNet-layout root."""
    root = Path(data_root)
    return majority_accuracy(folder_labels(root / 'train'), folder_labels(root / 'val'))


def majority_class_iou(train_counts: np.ndarray, val_counts: np.ndarray) -> dict[str, float]:
    """mIoU and mAcc (%) of predicting the most frequent training class at every labelled pixel.

    ``*_counts[c]`` is the number of pixels of class ``c`` (labelled pixels only). As mmseg's
    ``IoUMetric``: areas summed over the validation set, classes averaged where their union (IoU) or
    label area (Acc) is non-empty. With ``n_c`` of ``n`` validation pixels in the predicted class ``c``
    and ``K`` classes labelled or predicted, IoU_c = n_c / n and every other class scores 0, so
    mIoU = n_c / (n K); Acc_c = 1 if ``c`` is labelled and the rest 0, so mAcc = [n_c > 0] / K_labelled.
    """
    train_counts, val_counts = np.asarray(train_counts), np.asarray(val_counts)
    if train_counts.sum() == 0 or val_counts.sum() == 0:
        raise ValueError('need labelled pixels in both splits, got '
                         f'{train_counts.sum()} training and {val_counts.sum()} validation ones')
    majority = int(np.argmax(train_counts))
    present = set(np.flatnonzero(val_counts).tolist())
    miou = val_counts[majority] / val_counts.sum() / len(present | {majority})
    macc = float(majority in present) / len(present)
    return dict(mIoU=100 * miou, mAcc=100 * macc)


def ade20k_label_counts(annotation_dir: str | Path) -> np.ndarray:
    """Pixels per ADE20K id (0..255) over a folder of label PNGs; id 0 (unlabelled) counted as 0.

    Under ``reduce_zero_label`` mmseg ignores id 0 and shifts the others down by one, which
    renames the classes but leaves :func:`majority_class_iou` unchanged.
    """
    from PIL import Image
    paths = sorted(Path(annotation_dir).glob('*.png'))
    if not paths:
        raise FileNotFoundError(f'no label PNGs in {annotation_dir}')
    counts = np.zeros(256, dtype=np.int64)
    for path in paths:
        counts += np.bincount(np.asarray(Image.open(path)).ravel(), minlength=256)
    counts[0] = 0
    return counts


def segmentation_baseline(data_root: str | Path) -> dict[str, float]:
    """:func:`majority_class_iou` of an ADE20K root's training and validation label maps."""
    annotations = Path(data_root) / 'annotations'
    return majority_class_iou(ade20k_label_counts(annotations / 'training'),
                              ade20k_label_counts(annotations / 'validation'))


def random_detections(gt: dict, train: dict, per_image: int, rng: np.random.Generator) -> list[dict]:
    """``per_image`` random boxes for every image of the COCO dict ``gt``, in COCO results format.

    Each box takes the width, height and category of a training box (non-crowd ones of the COCO
    dict ``train``) drawn uniformly, a position uniform over the places where it fits in the image
    (clipped to the image if it is larger) and a score uniform in [0, 1).
    """
    boxes = [(a['bbox'][2], a['bbox'][3], a['category_id']) for a in train['annotations'] if not a['iscrowd']]
    if not boxes:
        raise ValueError('the training annotations hold no non-crowd box to draw sizes and classes from')
    if per_image < 1:
        raise ValueError(f'per_image must be >= 1, got {per_image}')
    detections = []
    for image in gt['images']:
        for i in rng.integers(len(boxes), size=per_image):
            w, h, category = boxes[i]
            w, h = min(w, image['width']), min(h, image['height'])
            x, y = rng.uniform(0, image['width'] - w), rng.uniform(0, image['height'] - h)
            detections.append(dict(image_id=image['id'], category_id=category, bbox=[x, y, w, h],
                                   score=float(rng.random())))
    return detections


def box_ap(gt: dict, detections: list[dict]) -> dict[str, float]:
    """COCO box AP and AP50 (%) of ``detections`` on the COCO dict ``gt`` (pycocotools' ``COCOeval``)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    if not any(not a['iscrowd'] for a in gt['annotations']) or not detections:
        raise ValueError(f"need a non-crowd ground-truth box and a detection, got {len(gt['annotations'])} "
                         f'annotations and {len(detections)} detections')
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        evaluator = COCOeval(coco, coco.loadRes(detections), 'bbox')
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    ap, ap50 = evaluator.stats[:2]
    return {'box AP': 100 * float(ap), 'box AP50': 100 * float(ap50)}


def detection_baseline(data_root: str | Path, per_image: int = 100, repeats: int = 5,
                       seed: int = 0) -> dict[str, float]:
    """Mean :func:`box_ap` of :func:`random_detections` on ``val2017`` over ``repeats`` draws.

    ``per_image`` 100 is the detection limit of COCO's AP (``maxDets``), the most a detector may give.
    """
    annotations = Path(data_root) / 'annotations'
    gt, train = (json.loads((annotations / f'instances_{s}2017.json').read_text()) for s in ('val', 'train'))
    rng = np.random.default_rng(seed)
    runs = [box_ap(gt, random_detections(gt, train, per_image, rng)) for _ in range(repeats)]
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


@dataclass(frozen=True)
class Judged:
    """A stage's metric beside its baseline, and whether it clears it by the margin."""

    stage: str
    metric: str
    value: float
    baseline: float

    @property
    def needed(self) -> float:
        return max(FACTOR * self.baseline, self.baseline + MARGIN)

    @property
    def passed(self) -> bool:
        return self.value >= self.needed

    def __str__(self) -> str:
        verdict = 'clears it' if self.passed else 'FAILS'
        return (f'{self.stage}: {self.metric} {self.value:.2f}, chance {self.baseline:.2f}; '
                f'needs {self.needed:.2f} (max of {FACTOR:g}x and +{MARGIN:g} points): {verdict}')


#: The chance baseline of each judged metric, from the root of the stage's dataset.
CHANCE = {'top-1': classification_baseline,
          'mIoU': lambda root: segmentation_baseline(root)['mIoU'],
          'box AP': lambda root: detection_baseline(root)['box AP']}


class MissingResult(FileNotFoundError):
    """No test result of a stage holds the metric it is judged by."""


def judge_test(stage: str, test_dir: Path, metric: str, data_root: Path) -> Judged:
    """``stage``'s ``metric`` in its ``mim test`` result under ``test_dir`` (:func:`.results.read_work_dir`)
    beside the chance baseline (:data:`CHANCE`) of its dataset at ``data_root``.

    Raises :class:`MissingResult` naming the stage when no test result there holds the metric.
    """
    run = read_work_dir(test_dir) if test_dir.is_dir() else None
    if run is None or metric not in run.metrics:
        raise MissingResult(f'[{stage}] no {metric} in a test result under {test_dir}')
    return Judged(stage, metric, run.metrics[metric], CHANCE[metric](data_root))


def shortfall(results: Sequence[Judged]) -> str | None:
    """None when every stage clears its baseline, else the sentence naming those that do not."""
    failed = [r.stage for r in results if not r.passed]
    if not failed:
        return None
    return (f'{", ".join(failed)} did not clear its chance baseline by the margin '
            f'(at least {FACTOR:g}x the baseline and {MARGIN:g} points above it)')
