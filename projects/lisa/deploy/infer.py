"""Semantic segmentation from an exported ONNX file alone: onnxruntime, numpy, OpenCV and the
file's metadata (:mod:`.metadata`); neither torch nor an OpenMMLab library is imported.

An image goes the way mmseg's test takes it (the test pipeline's resize, ``SegDataPreProcessor``
then ``EncoderDecoder.predict``): resized as the metadata says (:func:`resize`, shared with the
detector), channels swapped to RGB and normalised if the metadata says so, padded at the bottom
and right to multiples of ``size_divisor`` with ``pad_val``, the logits resized bilinearly to
the padded size, the padding cut off, resized bilinearly back to the image's size, argmax over
the classes. The overlay is that of mmseg's ``SegLocalVisualizer`` without the label texts.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .metadata import Metadata, MetadataError
from .resize import RESIZES

ROWS_PER_BLOCK = 64  # rows of the resized logits held at once (150 classes x 64 x 2048 floats: 79 MB)


def open_session(path: str | Path, *tasks: str) -> tuple[object, Metadata]:
    """The onnxruntime (CPU) session of the file at ``path`` and its :class:`Metadata`;
    :class:`MetadataError` unless it is an ONNX file of one of ``tasks``."""
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    except ort.capi.onnxruntime_pybind11_state.InvalidProtobuf as error:
        raise MetadataError(f'{path} is not an ONNX model ({error})') from None
    metadata = Metadata.from_props(session.get_modelmeta().custom_metadata_map, str(path))
    if metadata.task not in tasks:
        raise MetadataError(f'{path} holds task {metadata.task!r}; only {" or ".join(map(repr, tasks))} models run '
                            'here')
    return session, metadata


def resize(image: np.ndarray, m: Metadata) -> tuple[np.ndarray, tuple[float, float]]:
    """``image`` resized by the test pipeline's resize (``m.resize``: mmcv's ``Resize``
    transform, which mmdet's and mmseg's extend to boxes and maps, or PVT's ``AlignResize``, run
    on the image; :mod:`.resize` computes them as mmcv does) and its scale factor ``(s_w, s_h)``,
    new size over old."""
    if m.resize is None:
        return image, (1.0, 1.0)
    args = dict(m.resize)
    return RESIZES[args.pop('type')](image, **args)


def preprocess(image: np.ndarray, m: Metadata) -> np.ndarray:
    """The model's input ``(1, 3, H', W')`` (float32) for a BGR ``(H, W, 3)`` image, as mmseg's
    ``SegDataPreProcessor`` and mmdet's ``DetDataPreprocessor`` make it: channels swapped,
    normalised, then padded at the bottom and right to multiples of ``size_divisor``."""
    x = image[..., ::-1] if m.bgr_to_rgb else image
    x = x.astype(np.float32)
    if m.mean is not None:
        x = (x - np.float32(m.mean)) / np.float32(m.std)
    if m.size_divisor:
        h, w = image.shape[:2]
        pad = (-h % m.size_divisor, -w % m.size_divisor)
        x = np.pad(x, ((0, pad[0]), (0, pad[1]), (0, 0)), constant_values=m.pad_val)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


class OnnxSegmentor:
    """An exported segmentor (``tools/export_onnx.py``) run by onnxruntime on the CPU."""

    def __init__(self, path: str | Path, opened: tuple[object, Metadata] | None = None) -> None:
        """``opened``: the file's session and metadata if :func:`open_session` has read them."""
        self.path = path
        self.session, self.metadata = opened or open_session(path, 'segmentation')

    def __call__(self, image: np.ndarray) -> np.ndarray:
        """The label map ``(H, W)`` (int64, class indices) of a BGR ``(H, W, 3)`` image."""
        resized, _ = resize(image, self.metadata)
        x = preprocess(resized, self.metadata)
        logits = self.session.run(None, {self.session.get_inputs()[0].name: x})[0][0]
        if logits.shape[0] != len(self.metadata.classes):
            raise MetadataError(f'{self.path} gives {logits.shape[0]} logit channels for {len(self.metadata.classes)} '
                                'classes (a binary out_channels=1 head is not supported)')
        return upsample_argmax(logits, x.shape[2:], resized.shape[:2], self.metadata.align_corners, image.shape[:2])


def linear_taps(size_in: int, size_out: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices ``i0, i1`` and weight of ``i1`` for each output position of a linear resize
    from ``size_in`` to ``size_out``, as torch's ``F.interpolate(size=...)`` computes them."""
    out = np.arange(size_out, dtype=np.float64)
    if align_corners:
        src = out * ((size_in - 1) / (size_out - 1) if size_out > 1 else 0.0)
    else:
        src = np.maximum((out + 0.5) * (size_in / size_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    return i0, np.minimum(i0 + 1, size_in - 1), (src - i0).astype(np.float32)


def upsample_argmax(logits: np.ndarray, size: tuple[int, int], crop: tuple[int, int], align_corners: bool,
                    out: tuple[int, int] | None = None) -> np.ndarray:
    """Argmax over the classes of ``logits (C, h, w)`` resized bilinearly to ``size``, of its top
    left ``crop`` only, then resized bilinearly again to ``out`` (mmseg's test: to the padded
    input, padding cut off, back to the image's size before the test resize), a block of output
    rows at a time (the resized logits may not fit in memory). Bilinear is separable: columns
    are resized first, rows per block."""
    crop, out = tuple(crop), tuple(out or crop)
    (y0, y1, wy), (x0, x1, wx) = (tuple(t[:k] for t in linear_taps(n, m, align_corners))
                                  for n, m, k in zip(logits.shape[1:], size, crop))
    cols = logits[:, :, x0] * (1 - wx) + logits[:, :, x1] * wx  # (C, h, crop_w)
    if out != crop:
        (r0, r1, wr), (c0, c1, wc) = (linear_taps(n, m, align_corners) for n, m in zip(crop, out))
        cols = cols[:, :, c0] * (1 - wc) + cols[:, :, c1] * wc  # (C, h, out_w)

    def crop_rows(rows: np.ndarray) -> np.ndarray:  # (C, len(rows), cols) of the resized crop
        return cols[:, y0[rows]] * (1 - wy[rows, None]) + cols[:, y1[rows]] * wy[rows, None]

    labels = np.empty(out, dtype=np.int64)
    for start in range(0, out[0], ROWS_PER_BLOCK):
        block = slice(start, start + ROWS_PER_BLOCK)
        if out == crop:
            rows = crop_rows(np.arange(out[0])[block])
        else:  # each output row from the two rows of the crop it reads
            rows = crop_rows(r0[block]) * (1 - wr[block, None]) + crop_rows(r1[block]) * wr[block, None]
        labels[block] = rows.argmax(0)
    return labels


def blend(image: np.ndarray, labels: np.ndarray, palette: tuple[tuple[int, int, int], ...],
          opacity: float) -> np.ndarray:
    """``image`` (uint8, the palette's channel order) with each pixel's class colour laid over it at
    ``opacity``, as ``SegLocalVisualizer(alpha=opacity)`` draws a prediction (``with_labels=False``)."""
    mask = np.asarray(palette, dtype=np.uint8)[labels]
    return (image * (1 - opacity) + mask * opacity).astype(np.uint8)


def class_shares(labels: np.ndarray, classes: tuple[str, ...]) -> list[tuple[str, float]]:
    """``(class, share of the pixels)`` of the classes present, the largest share first."""
    counts = np.bincount(labels.ravel(), minlength=len(classes))
    order = np.argsort(-counts, kind='stable')
    return [(classes[i], float(counts[i] / labels.size)) for i in order if counts[i]]
