"""Pixel accuracy of a long-range probe, binned by each pixel's distance and hop count.

The probe side-car of an image ``<root>/img_dir/<split>/<name>.png`` is
``<root>/probe/<split>/<name>.npy``, uint16 ``(2, H, W)``: distance (px) and hops
(:mod:`.tasks`). Pixels whose label is ``ignore_index`` are not counted.

For the bin ``b`` of distances ``[edges[b], edges[b+1])`` and the hop count ``h``::

    acc(h, b) = 100 * #{pixels of (h, b): prediction == label} / #{pixels of (h, b)}

reported as ``acc`` (all pixels), ``acc_d<lo>-<hi>``, ``acc_h<h>`` and ``acc_h<h>_d<lo>-<hi>``
(bins without pixels are left out); ``out_file`` also gets the raw counts, per label class too (so
that a task with unequal classes can be scored class-balanced), as JSON rows
``dict(label, hops, lo, hi, correct, total)``.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from mmengine.evaluator import BaseMetric
from mmseg.registry import METRICS


def probe_path(img_path: str) -> Path:
    """The side-car of ``.../img_dir/<split>/<name>.png``: ``.../probe/<split>/<name>.npy``."""
    path = Path(img_path)
    if path.parent.parent.name != 'img_dir':
        raise ValueError(f'{img_path}: a probe image lies in img_dir/<split>/ (tools/long_range.py writes them)')
    return path.parent.parent.parent / 'probe' / path.parent.name / f'{path.stem}.npy'


def binned_counts(pred: np.ndarray, label: np.ndarray, probe: np.ndarray, edges: Sequence[float],
                  ignore_index: int = 255) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(label, hops, bin): (correct, total)}`` over the labelled pixels of one image."""
    if pred.shape != label.shape or probe.shape != (2, *label.shape):
        raise ValueError(f'shapes differ: prediction {pred.shape}, label {label.shape}, probe {probe.shape} '
                         '(expected (2, H, W))')
    valid = label != ignore_index
    bins = np.searchsorted(np.asarray(edges), probe[0][valid], side='right') - 1
    labels, hops, right = label[valid], probe[1][valid], pred[valid] == label[valid]
    inside = (bins >= 0) & (bins < len(edges) - 1)
    counts = {}
    for c, h, b in set(zip(labels[inside].tolist(), hops[inside].tolist(), bins[inside].tolist())):
        where = inside & (labels == c) & (hops == h) & (bins == b)
        counts[(c, h, b)] = (int(right[where].sum()), int(where.sum()))
    return counts


@METRICS.register_module()
class LongRangeAccuracy(BaseMetric):
    """Pixel accuracy per distance bin and hop count (see the module docstring).

    Args:
        distance_bins: increasing bin edges in px; a pixel beyond the last edge is not counted.
        ignore_index: the label of pixels not evaluated.
        out_file: where the raw counts go as JSON (None: nowhere).
    """

    default_prefix = 'long_range'

    def __init__(self, distance_bins: Sequence[float] = (0, 16, 32, 48, 64, 1e9), ignore_index: int = 255,
                 out_file: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        edges = list(distance_bins)
        if len(edges) < 2 or any(a >= b for a, b in zip(edges, edges[1:])):
            raise ValueError(f'distance_bins={edges} must be >= 2 increasing edges')
        self.edges, self.ignore_index, self.out_file = edges, ignore_index, out_file

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        for sample in data_samples:
            pred = sample['pred_sem_seg']['data'].squeeze(0).cpu().numpy()
            label = sample['gt_sem_seg']['data'].squeeze(0).cpu().numpy()
            probe = np.load(probe_path(sample['img_path']))
            self.results.append(binned_counts(pred, label, probe, self.edges, self.ignore_index))

    def compute_metrics(self, results: list) -> dict[str, float]:
        total: dict[tuple[int, int, int], list[int]] = {}
        for counts in results:
            for key, (c, n) in counts.items():
                acc = total.setdefault(key, [0, 0])
                acc[0] += c
                acc[1] += n
        rows = [dict(label=k, hops=h, lo=self.edges[b], hi=self.edges[b + 1], correct=c, total=n)
                for (k, h, b), (c, n) in sorted(total.items())]
        if self.out_file:
            Path(self.out_file).parent.mkdir(parents=True, exist_ok=True)
            Path(self.out_file).write_text(json.dumps(rows))

        def acc(keep) -> float | None:
            c = sum(r['correct'] for r in rows if keep(r))
            n = sum(r['total'] for r in rows if keep(r))
            return 100.0 * c / n if n else None

        def name(r: dict) -> str:
            return f"d{r['lo']:g}-{r['hi']:g}"

        metrics = {'acc': acc(lambda r: True)}
        for r in rows:
            metrics[f'acc_{name(r)}'] = acc(lambda s, r=r: name(s) == name(r))
            metrics[f"acc_h{r['hops']}"] = acc(lambda s, r=r: s['hops'] == r['hops'])
            metrics[f"acc_h{r['hops']}_{name(r)}"] = acc(lambda s, r=r: (s['hops'], name(s)) == (r['hops'], name(r)))
        return {k: v for k, v in metrics.items() if v is not None}
