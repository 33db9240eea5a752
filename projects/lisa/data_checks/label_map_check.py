"""The rules of an mmseg label map: :class:`LabelMapCheck`, the label values, channels and size that mmseg's
``LoadAnnotations`` reads correctly, with the sample's image checked as well.

mmseg accepts a bad label map without a word or fails far from its cause: an ADE20K label value 200 becomes
mmseg's target 199 and crashes the loss (``Target 199 is out of bounds``) in training and gives ``aAcc: nan``
in validation; an RGB label map or one of another size than its image fails in ``collate``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .data_problems import Problem, ranges
from .image_check import Rescale, image_problems, image_size, smallest_rescales, unreadable_image


@dataclass(frozen=True)
class LabelMapCheck:
    """The label maps mmseg's ``LoadAnnotations`` reads correctly, for a dataset of ``num_classes`` classes.

    A label map is a single-channel image (PNG mode ``L`` or ``P``) of its
    image's size. mmseg casts it to uint8, then with ``reduce_zero_label``
    maps the stored value ``v`` to ``255`` for ``v in {0, 255}`` and to
    ``v - 1`` otherwise. A mapped value must be a class (``< num_classes``)
    or ``ignore_index``, else the loss fails in training and the metric is
    ``nan`` in validation. ``LoadAnnotations`` squeezes the map
    (``squeeze()``), so a side of 1 px is dropped and the transforms after it
    fail: both sides must be at least 2 px. Its image is checked by
    :func:`.image_problems` against the pipeline's resizes (``rescales``).
    """

    num_classes: int
    reduce_zero_label: bool
    ignore_index: int = 255
    rescales: tuple[Rescale, ...] = ()

    @classmethod
    def of(cls, dataset) -> LabelMapCheck:
        # With custom classes, mmseg maps the stored ids of the original classes through label_map.
        classes = (dataset.label_map and type(dataset).METAINFO.get('classes')) or dataset.metainfo['classes']
        return cls(len(classes), bool(dataset.reduce_zero_label), int(dataset.ignore_index),
                   smallest_rescales(dataset.pipeline))

    def mapped(self, values: np.ndarray) -> np.ndarray:
        """The targets mmseg loads for stored label values (``reduce_zero_label`` applied)."""
        values = values.astype(np.int64)
        if self.reduce_zero_label:
            return np.where((values == 0) | (values == 255), 255, values - 1)
        return values

    def is_valid(self, values: np.ndarray) -> np.ndarray:
        """Whether each stored label value is a class or ignored (element-wise)."""
        values = values.astype(np.int64)
        mapped = self.mapped(values)
        return (values >= 0) & (values <= 255) & ((mapped < self.num_classes) | (mapped == self.ignore_index))

    @property
    def valid_values(self) -> str:
        """The valid stored values, with their meaning."""
        values = np.arange(256)
        stored = ranges(values[self.is_valid(values)].tolist())
        if self.reduce_zero_label:
            return (f'{stored} (the {self.num_classes} classes are stored as 1..{self.num_classes} under '
                    f'reduce_zero_label; 0 and 255 are ignored)')
        return (f'{stored} (the {self.num_classes} classes are 0..{self.num_classes - 1}; '
                f'{self.ignore_index} is ignored)')

    def __call__(self, info: Mapping) -> list[Problem]:
        """The problems of one sample, ``info`` holding its ``img_path`` and ``seg_map_path``."""
        return self.inspect(info)[0]

    def inspect(self, info: Mapping) -> tuple[list[Problem], frozenset[int]]:
        """The problems of one sample, and the classes (``< num_classes``) its label map holds once loaded."""
        path = info['seg_map_path']
        try:
            with Image.open(path) as label:
                mode, array = label.mode, np.asarray(label)
        except (OSError, ValueError) as error:
            return [Problem(path, f'cannot be read as an image ({type(error).__name__}: {error})',
                            'a PNG label map')], frozenset()
        if array.ndim == 3 and array.shape[2] == 1:
            array = array[..., 0]
        if array.ndim != 2:
            return [Problem(path, f'has {array.shape[2]} channels (PNG mode {mode!r}, shape {array.shape}), '
                                  'not one class id per pixel',
                            "a single-channel label map of class ids (PNG mode 'L' or 'P')")], frozenset()
        problems = []
        if min(array.shape) < 2:
            problems.append(Problem(path, f'is {array.shape[0]}x{array.shape[1]} (HxW): mmseg\'s LoadAnnotations '
                                          'drops its 1-px side (squeeze()) and the transforms after it fail',
                                    'label maps and images with both sides of at least 2 px: pad the sample or '
                                    'remove it'))
        if array.dtype in (np.uint8, np.uint16):  # a histogram is faster than sorting
            counts = np.bincount(array.ravel())
            values = np.flatnonzero(counts)
            counts = counts[values]
        else:
            values, counts = np.unique(array, return_counts=True)
        bad = ~self.is_valid(values)
        if bad.any():
            listed = ', '.join(f'{v} ({c} px)' for v, c in zip(values[bad][:10].tolist(), counts[bad][:10].tolist()))
            more = f' and {bad.sum() - 10} more' if bad.sum() > 10 else ''
            problems.append(Problem(path, f'holds label value{"s" if bad.sum() > 1 else ""} {listed}{more}, '
                                          f'not a class of the {self.num_classes}', self.valid_values))
        try:
            size = image_size(info['img_path'])
        except (OSError, ValueError) as error:
            problems.append(unreadable_image(info['img_path'], f'{type(error).__name__}: {error}'))
        else:
            if array.shape != size:
                problems.append(Problem(path, f'is {array.shape[0]}x{array.shape[1]} (HxW) but its image '
                                              f'{info["img_path"]} is {size[0]}x{size[1]}',
                                        'a label map of the same size as its image'))
            problems += image_problems(info['img_path'], self.rescales)
        mapped = self.mapped(values[self.is_valid(values)])
        return problems, frozenset(mapped[mapped < self.num_classes].tolist())
