"""The test pipeline's image resize without mmcv: mmcv's ``Resize`` transform and PVT's
``AlignResize`` (:mod:`projects.lisa.datasets.transforms`) on an image, with OpenCV (``backend='cv2'``)
or Pillow (``backend='pillow'``), so that inference from an exported file needs neither torch nor
mmcv. Each step is mmcv 2.x's own arithmetic (``mmcv.image.geometric``), compared with it in
``tests/test_onnx_infer.py``:

* ``Resize(scale=(w, h))`` resizes to ``(w, h)``, or with ``keep_ratio`` rescales by the largest
  factor that fits the long side into ``max(scale)`` and the short one into ``min(scale)``;
  ``Resize(scale_factor=(f_w, f_h))`` first turns the factor into a scale,
  ``(int(w f_w + 0.5), int(h f_h + 0.5))``;
* ``AlignResize(scale, size_divisor=d)`` rescales as ``keep_ratio`` does, then rounds each side
  up to a multiple of ``d`` and resizes to that.

The scale factor returned is ``(s_w, s_h)``, new size over old, as the transforms record it.
"""
from __future__ import annotations

import math

import numpy as np

INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'area', 'lanczos')  # mmcv's cv2_interp_codes


def scale_size(size: tuple[int, int], factor: float | tuple[float, float]) -> tuple[int, int]:
    """``(w, h)`` scaled by ``factor`` (one, or per side), rounded half up (mmcv's ``_scale_size``)."""
    f_w, f_h = (factor, factor) if isinstance(factor, (int, float)) else factor
    w, h = size
    return int(w * float(f_w) + 0.5), int(h * float(f_h) + 0.5)


def rescale_size(size: tuple[int, int], scale: tuple[int, int]) -> tuple[int, int]:
    """``(w, h)`` rescaled as far as it fits ``scale``: long side ``<= max(scale)``, short side
    ``<= min(scale)`` (mmcv's ``rescale_size`` with a tuple)."""
    w, h = size
    return scale_size(size, min(max(scale) / max(h, w), min(scale) / min(h, w)))


def imresize(image: np.ndarray, size: tuple[int, int], interpolation: str = 'bilinear',
             backend: str = 'cv2') -> np.ndarray:
    """``image`` resized to ``size = (w, h)`` (mmcv's ``imresize``)."""
    if backend == 'pillow':
        from PIL import Image
        filters = getattr(Image, 'Resampling', Image)  # Pillow >= 9.1 names them Resampling.*
        if image.dtype != np.uint8:
            raise ValueError('the pillow resize backend takes uint8 images only')
        return np.array(Image.fromarray(image).resize(size, getattr(filters, interpolation.upper())))
    if backend != 'cv2':
        raise ValueError(f"resize backend {backend!r} is not 'cv2' or 'pillow'")
    import cv2
    codes = dict(zip(INTERPOLATIONS, (cv2.INTER_NEAREST, cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_AREA,
                                      cv2.INTER_LANCZOS4)))
    return cv2.resize(image, size, interpolation=codes[interpolation])


def resize_image(image: np.ndarray, scale: int | tuple[int, int] | None = None,
                 scale_factor: float | tuple[float, float] | None = None, keep_ratio: bool = False,
                 interpolation: str = 'bilinear', backend: str = 'cv2') -> tuple[np.ndarray, tuple[float, float]]:
    """mmcv's ``Resize(...).transform(dict(img=image))``: the resized image and its scale factor."""
    h, w = image.shape[:2]
    if scale is None:
        if scale_factor is None:
            raise ValueError('Resize needs a scale or a scale_factor')
        scale = scale_size((w, h), scale_factor)
    elif isinstance(scale, int):
        scale = (scale, scale)
    size = rescale_size((w, h), tuple(scale)) if keep_ratio else tuple(scale)
    out = imresize(image, size, interpolation, backend)
    return out, (out.shape[1] / w, out.shape[0] / h) if keep_ratio else (size[0] / w, size[1] / h)


def align_resize_image(image: np.ndarray, scale: tuple[int, int] = (2048, 512), size_divisor: int = 32,
                       interpolation: str = 'bilinear') -> tuple[np.ndarray, tuple[float, float]]:
    """PVT's ``AlignResize(...).transform(dict(img=image))``: the resized image and its scale factor."""
    h, w = image.shape[:2]
    new_w, new_h = rescale_size((w, h), tuple(scale))
    d = size_divisor
    return resize_image(image, (math.ceil(new_w / d) * d, math.ceil(new_h / d) * d), interpolation=interpolation)


RESIZES = {'Resize': resize_image, 'AlignResize': align_resize_image}
