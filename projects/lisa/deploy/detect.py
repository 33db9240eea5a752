"""Instance detection from an exported Mask R-CNN file alone (:mod:`.detector` is its graph):
onnxruntime, numpy, OpenCV and the file's metadata (:mod:`.metadata`); neither torch nor an
OpenMMLab library is imported.

An image goes the way mmdet's test takes it:

* the test pipeline's ``Resize`` (:func:`.infer.resize`: mmcv's transform as :mod:`.resize`
  computes it, ``imrescale`` with ``keep_ratio``, else ``imresize``), which records the scale
  factor ``(s_w, s_h)`` (new size over old, per side);
* ``DetDataPreprocessor``: channels to RGB, normalised, padded at the bottom and right to
  multiples of ``pad_size_divisor`` (:func:`.infer.preprocess`);
* the graph, with ``img_shape`` the resized image's ``(h, w)``: boxes, scores, labels and
  ``28 x 28`` mask probabilities in the resized frame;
* ``FCNMaskHead._predict_by_feat_single`` with ``rescale=True`` on the CPU: boxes divided by
  ``(s_w, s_h, s_w, s_h)``, then each mask pasted into its box over the original image
  (:func:`paste_mask`, mmdet's ``_do_paste_mask``) and thresholded at ``mask_thr``.

:func:`draw_detections` draws them as mmdet's ``DetLocalVisualizer`` draws a prediction.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from .infer import open_session, preprocess, resize
from .metadata import Metadata, MetadataError

OUTPUTS = ('boxes', 'scores', 'labels', 'masks')  # MaskRCNNDetections.output_names (.detector needs torch)
TEXT_COLOUR = (200, 200, 200)  # DetLocalVisualizer's text_color


@dataclass
class Detections:
    """Detections in the original image, by decreasing score: ``boxes (K, 4)`` (x1, y1, x2, y2,
    float32), ``scores (K,)``, ``labels (K,)`` (class indices), ``masks (K, H, W)`` (bool)."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    masks: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    def above(self, score_thr: float) -> Detections:
        """Those scoring above ``score_thr`` (``DetLocalVisualizer``'s ``pred_score_thr``)."""
        keep = self.scores > score_thr
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep], self.masks[keep])


class OnnxDetector:
    """An exported Mask R-CNN (``tools/export_onnx.py``) run by onnxruntime on the CPU."""

    def __init__(self, path: str | Path, opened: tuple[object, Metadata] | None = None) -> None:
        """``opened``: the file's session and metadata if :func:`.infer.open_session` has read them."""
        self.path = path
        self.session, self.metadata = opened or open_session(path, 'detection')
        outputs = tuple(o.name for o in self.session.get_outputs())
        if outputs != OUTPUTS:
            raise MetadataError(f"{path} gives outputs {outputs}, not a Mask R-CNN's {OUTPUTS}")
        if self.metadata.mask_thr is None:
            raise MetadataError(f'{path} carries no mask threshold (mask_thr): re-export it with tools/export_onnx.py')

    def prepare(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
        """The graph's inputs ``input (1, 3, H', W')`` and ``img_shape (2,)`` for a BGR
        ``(H, W, 3)`` image, and the scale factor ``(s_w, s_h)`` of its resize."""
        resized, scale_factor = resize(image, self.metadata)
        return preprocess(resized, self.metadata), np.array(resized.shape[:2], dtype=np.int64), scale_factor

    def __call__(self, image: np.ndarray) -> Detections:
        """The detections of a BGR ``(H, W, 3)`` image, in its own frame."""
        x, img_shape, scale_factor = self.prepare(image)
        names = [i.name for i in self.session.get_inputs()]
        boxes, scores, labels, masks = self.session.run(None, dict(zip(names, (x, img_shape))))
        boxes = boxes / np.float32(scale_factor * 2)  # (s_w, s_h, s_w, s_h), in float32 as mmdet divides
        pasted = np.zeros((len(boxes), *image.shape[:2]), dtype=bool)
        for i, (mask, box) in enumerate(zip(masks, boxes)):
            probabilities, region = paste_mask(mask, box, image.shape[:2])
            pasted[i][region] = probabilities >= self.metadata.mask_thr
        return Detections(boxes, scores, labels, pasted)


def paste_mask(mask: np.ndarray, box: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, tuple[slice, slice]]:
    """mmdet's ``_do_paste_mask(skip_empty=True)`` for one ``(h, w)`` mask: its probabilities
    over the pixels near ``box`` (x1, y1, x2, y2) in an image of ``shape (H, W)``, and where
    they go.

    The region is ``floor(x1) - 1 <= x < ceil(x2) + 1`` (clipped to the image), likewise in y.
    Pixel centre ``x + 0.5`` sits at ``g = (x + 0.5 - x1) / (x2 - x1) * 2 - 1`` in the box (infinite
    ``g`` of an empty box set to 0), which ``grid_sample(align_corners=False)`` reads at
    ``u = (g + 1) w / 2 - 1 / 2`` in the mask: bilinear between the 4 nearest cells, cells outside
    the mask 0. In float32 with the roundings of torch's vectorised CPU kernel, which fuses
    multiply-adds (:func:`grid_weights`): on a CPU with FMA the probabilities are torch's to the bit."""
    x1, y1, x2, y2 = box.astype(np.float32)
    left, top = max(int(np.floor(x1)) - 1, 0), max(int(np.floor(y1)) - 1, 0)
    right, bottom = min(int(np.ceil(x2)) + 1, shape[1]), min(int(np.ceil(y2)) + 1, shape[0])
    weights = [grid_weights(np.arange(start, end, dtype=np.float32) + np.float32(0.5), low, high, size)
               for start, end, low, high, size in ((top, bottom, y1, y2, mask.shape[0]),
                                                   (left, right, x1, x2, mask.shape[1]))]
    (iy, wy0, wy1), (ix, wx0, wx1) = weights
    padded = np.pad(mask.astype(np.float32), 1)  # cells -1 and h (or w) read 0; others are clipped there

    def cell(dy: int, dx: int) -> np.ndarray:
        rows = np.clip(iy + dy, -1, mask.shape[0]) + 1
        cols = np.clip(ix + dx, -1, mask.shape[1]) + 1
        return padded[rows[:, None], cols[None, :]]

    # torch's vectorised CPU kernel: the corners' weights are products of the sides' weights, and
    # the sum nw + ne + sw + se is accumulated by fused multiply-adds (a product of two float32s
    # is exact in float64, so float64 then one rounding gives the fused result)
    out = cell(0, 0) * (wy0[:, None] * wx0[None])
    for (dy, dx), weight in (((0, 1), wy0[:, None] * wx1[None]), ((1, 0), wy1[:, None] * wx0[None]),
                             ((1, 1), wy1[:, None] * wx1[None])):
        out = (cell(dy, dx).astype(np.float64) * weight + out).astype(np.float32)
    return out, (slice(top, max(bottom, top)), slice(left, max(right, left)))


def grid_weights(centres: np.ndarray, low: np.float32, high: np.float32,
                 size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For pixel centres along one side: the mask cell ``i = floor(u)`` before each sample and the
    weights ``1 - (u - i)``, ``u - i`` of cells ``i`` and ``i + 1`` (:func:`paste_mask`)."""
    with np.errstate(divide='ignore', invalid='ignore'):
        g = (centres - low) / (high - low) * 2 - 1
    g[np.isinf(g)] = 0
    # one rounding of (g + 1) size/2 - 1/2 (exact in float64), as the kernel's fused multiply-add
    u = ((g + 1).astype(np.float64) * (size / 2) - 0.5).astype(np.float32)
    i = np.floor(u)
    far = u - i
    return i.astype(np.int64), 1 - far, far


def blend_masks(image: np.ndarray, masks: np.ndarray, colours: list[tuple[int, int, int]],
                alpha: float) -> np.ndarray:
    """``image`` (uint8) with each mask's colour laid over it at ``alpha``, one mask after the
    other: mmengine's ``Visualizer.draw_binary_masks``."""
    for mask, colour in zip(masks, colours):
        coloured = np.where(mask[..., None], np.asarray(colour, dtype=np.uint8), image)
        image = cv2.addWeighted(image, 1 - alpha, coloured, alpha, 0)
    return image


def adaptive_scale(area: float) -> float:
    """mmdet's ``_get_adaptive_scales``: 0.5 below an area of 30,000 pixels, else 1."""
    return float(np.clip(0.5 + (area - 800) // (30000 - 800), 0.5, 1.0))


def draw_detections(image: np.ndarray, detections: Detections, classes: tuple[str, ...],
                    palette: tuple[tuple[int, int, int], ...], alpha: float = 0.8, line_width: int = 3) -> np.ndarray:
    """``image`` (RGB, uint8) with ``detections`` drawn as ``DetLocalVisualizer._draw_instances``
    draws them, in the same order: boxes in their class's palette colour (``line_width`` 3,
    ``alpha`` 0.8), a ``"class: score"`` label (score in percent, 1 decimal) in light grey on
    black at the box's top left corner, 13 px text (half that below 30,000 pixels of box), then
    white mask outlines and the masks blended over all of it in the class colours. Drawn with
    OpenCV rather than matplotlib, so lines and letters differ by a pixel; the masks are not
    jittered (mmdet moves each mask's colour at random to tell instances apart)."""
    canvas = image.copy()
    if not len(detections):
        return canvas
    layer = canvas.copy()
    for box, label in zip(detections.boxes, detections.labels):
        x1, y1, x2, y2 = np.round(box).astype(int).tolist()
        cv2.rectangle(layer, (x1, y1), (x2, y2), tuple(int(c) for c in palette[label]), line_width)
    canvas = cv2.addWeighted(canvas, 1 - alpha, layer, alpha, 0)
    for box, label, score in zip(detections.boxes, detections.labels, detections.scores):
        text = f'{classes[label]}: {round(float(score) * 100, 1)}'
        size = 13 * adaptive_scale(float((box[2] - box[0]) * (box[3] - box[1])))
        font_scale = size / 30  # Hershey simplex letters are about 30 px high at scale 1 (with descenders)
        (w, h), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, font_scale, 1)
        x, y = (int(round(v)) + line_width for v in box[:2])
        background = canvas.copy()
        cv2.rectangle(background, (x, y), (x + w + 2, y + h + base + 2), (0, 0, 0), -1)
        canvas = cv2.addWeighted(canvas, 1 - alpha, background, alpha, 0)
        cv2.putText(canvas, text, (x + 1, y + h + 1), cv2.FONT_HERSHEY_SIMPLEX, font_scale, TEXT_COLOUR, 1,
                    cv2.LINE_AA)
    outlines = canvas.copy()
    for mask in detections.masks:
        contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(outlines, contours, -1, (255, 255, 255), 1)
    canvas = cv2.addWeighted(canvas, 1 - alpha, outlines, alpha, 0)
    return blend_masks(canvas, detections.masks, [palette[label] for label in detections.labels], alpha)
