"""Data transforms of the recipes the paper follows, registered into mmseg's TRANSFORMS."""
from __future__ import annotations

import math

from mmcv.image import rescale_size
from mmcv.transforms import BaseTransform, Resize
from mmseg.registry import TRANSFORMS


@TRANSFORMS.register_module()
class AlignResize(BaseTransform):
    """PVT's evaluation resize for Semantic FPN: keep the aspect ratio, then round each side up.

    The image is first rescaled so that it fits ``scale`` (long side ``<= max(scale)``, short
    side ``<= min(scale)``, the largest such factor, as ``Resize(keep_ratio=True)``), then resized
    to the next multiples of ``size_divisor`` (a few pixels of stretch, no padding):

        (h', w') = rescale_size((w, h), scale)[::-1]
        (H, W)   = (ceil(h' / d) * d, ceil(w' / d) * d)

    ``img``, ``img_shape``, ``scale_factor`` and, if loaded, ``gt_seg_map`` follow.
    """

    def __init__(self, scale: tuple[int, int] = (2048, 512), size_divisor: int = 32,
                 interpolation: str = 'bilinear') -> None:
        if len(scale) != 2 or min(scale) < 1:
            raise ValueError(f'scale={scale} must be two positive ints')
        if size_divisor < 1:
            raise ValueError(f'size_divisor={size_divisor} must be a positive int')
        self.scale, self.size_divisor, self.interpolation = tuple(scale), size_divisor, interpolation

    def aligned_size(self, h: int, w: int) -> tuple[int, int]:
        """``(H, W)`` for an ``h x w`` image."""
        new_w, new_h = rescale_size((w, h), self.scale)
        d = self.size_divisor
        return math.ceil(new_h / d) * d, math.ceil(new_w / d) * d

    def transform(self, results: dict) -> dict:
        h, w = self.aligned_size(*results['img'].shape[:2])
        return Resize(scale=(w, h), keep_ratio=False, interpolation=self.interpolation).transform(results)

    def __repr__(self) -> str:
        return f'{type(self).__name__}(scale={self.scale}, size_divisor={self.size_divisor})'
