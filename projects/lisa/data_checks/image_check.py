"""The rules of a sample's image: decodable in full, not shrunk to 0 px by the pipeline's aspect-keeping
resizes, not constant, and 16-bit only where it decodes to 8 bits with content; :class:`ImageCheck` applies
them to the samples of detection and classification datasets, with a classification sample's label.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .data_problems import Problem
from .loaded_classes import is_loaded_instance

EXIF_ORIENTATION = 0x0112
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)
"""EXIF orientations that swap width and height; OpenCV (mmcv's default image decoder) applies them."""
MIN_16_BIT_LEVELS = 16
"""The fewest 8-bit levels a 16-bit image may decode to. A 16-bit image decoding to fewer spans less than 12 bits
and decodes near black (values 0..1000 to 0..3), which training learns nothing from; 12-bit data (0..4095)
decodes to the 16 levels 0..15."""


def image_size(path: str) -> tuple[int, int]:
    """``(height, width)`` of an image as OpenCV decodes it (EXIF orientation applied), from its header."""
    with Image.open(path) as image:
        return oriented_size(image)


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """``(height, width)`` of an opened image as OpenCV decodes it (EXIF orientation applied)."""
    width, height = image.size
    if image.getexif().get(EXIF_ORIENTATION, 1) in TRANSPOSED_ORIENTATIONS:
        width, height = height, width
    return height, width


def is_16_bit(image: Image.Image) -> bool:
    """Whether an opened (not yet loaded) image stores 16 bits per channel.

    Pillow opens a 16-bit colour PNG as 8-bit ``'RGB'``; the raw mode of its tiles (``'RGB;16B'``, ``'I;16B'``)
    tells the stored depth, and ``load()`` drops the tiles.
    """
    return any(';16' in (tile.args if isinstance(tile.args, str) else tile.args[0]) for tile in image.tile)


def unreadable_image(path: str, reason: str) -> Problem:
    """The problem of an image the loader cannot decode in full, ``reason`` saying why."""
    return Problem(path, f'cannot be read as an image ({reason})',
                   'a complete JPEG or PNG file (copy or export it again, or remove the sample)')


Rescale = tuple[str, tuple[int, int], str]
"""A resize of a pipeline that keeps the aspect ratio: its name, the smallest target ``scale`` it draws, and the
edge it sets (mmpretrain's ``ResizeEdge``: ``'short'``, ``'long'``, ``'width'``, ``'height'``), ``''`` for mmcv's
rescale to fit ``scale``."""


def smallest_rescales(pipeline) -> tuple[Rescale, ...]:
    """The aspect-keeping resizes of a built pipeline, each with the smallest ``scale`` it may draw.

    ``Resize(keep_ratio=True)`` and PVT's ``AlignResize`` use their ``scale``; ``RandomResize`` draws
    ``(int(s0 * r), int(s1 * r))`` for ``r`` in ``ratio_range`` (smallest at ``r = min(ratio_range)``) or
    each edge between two scales (smallest: the minimum of each); mmpretrain's ``ResizeEdge`` sets one edge to
    its ``scale``. mmcv's ``rescale_size`` grows with the scale, so the smallest scale gives the smallest image.
    """
    from mmcv.transforms import RandomResize, Resize
    from mmengine.utils import is_seq_of
    found = []
    for transform in getattr(pipeline, 'transforms', []):
        scale = getattr(transform, 'scale', None)
        if is_loaded_instance(transform, 'mmpretrain.datasets.transforms.processing', 'ResizeEdge'):
            found.append((type(transform).__name__, (int(scale), int(scale)), transform.edge))
            continue
        if isinstance(transform, RandomResize):
            if not getattr(transform.resize, 'keep_ratio', False):
                continue
            if is_seq_of(scale, int) and transform.ratio_range is not None:
                low = min(transform.ratio_range)
                scale = (int(scale[0] * low), int(scale[1] * low))
            elif is_seq_of(scale, Sequence):
                scale = (min(s[0] for s in scale), min(s[1] for s in scale))
        elif not ((isinstance(transform, Resize) and transform.keep_ratio)
                  or is_loaded_instance(transform, 'projects.lisa.datasets.transforms', 'AlignResize')):
            continue
        if is_seq_of(scale, int) and len(scale) == 2:  # else a scale_factor or a form mmcv itself refuses
            found.append((type(transform).__name__, (int(scale[0]), int(scale[1])), ''))
    return tuple(found)


def rescaled_size(size: tuple[int, int], scale: tuple[int, int], edge: str = '') -> tuple[int, int]:
    """``(height, width)`` of an image of ``size`` (HxW) after a :data:`Rescale` to ``scale`` along ``edge``.

    mmcv rescales to fit ``scale`` by ``f = min(max(scale) / max(h, w), min(scale) / min(h, w))`` and rounds each
    side as ``int(side * f + 0.5)``; ``ResizeEdge`` sets the edge to ``scale`` and the other side to
    ``int(scale * other / edge)``.
    """
    height, width = size
    if not edge:
        from mmcv.image import rescale_size
        new_w, new_h = rescale_size((width, height), scale)
        return new_h, new_w
    target = scale[0]
    if (edge == 'short' and width < height) or (edge == 'long' and width > height) or edge == 'width':
        return int(target * height / width), target
    return target, int(target * width / height)


def rescale_problems(path: str, size: tuple[int, int], rescales: Sequence[Rescale]) -> list[Problem]:
    """An image that an aspect-keeping resize of the pipeline shrinks to a side of 0 px (OpenCV fails)."""
    height, width = size
    for name, scale, edge in rescales:
        new_h, new_w = rescaled_size(size, scale, edge)
        if min(new_w, new_h) < 1:
            what = f'{name}(edge={edge!r}) rescales with its scale {scale[0]}' if edge else \
                f'{name} rescales at its smallest scale {scale}'
            limit = scale[0] if edge else 2 * max(scale)
            return [Problem(path, f'is {height}x{width} (HxW), which {what} to {new_h}x{new_w}: OpenCV cannot resize '
                                  'to 0 px and training stops there',
                            f'an aspect ratio (long / short side) of at most about {limit} for this pipeline: crop or '
                            'pad the image (and its labels), or remove the sample')]
    return []


def image_problems(path: str, rescales: Sequence[Rescale] = ()) -> list[Problem]:
    """What the pipeline makes of an image: not decodable in full, too small for its resizes, constant, or 16-bit.

    The image is decoded as ``LoadImageFromFile`` does (``mmcv.imread``: OpenCV, 8-bit colour) and in full by
    Pillow, since OpenCV decodes a file cut short to nothing (OpenCV 5) or to the rows it holds, grey below
    (OpenCV 4). A constant image carries no signal (usually a broken export). OpenCV converts a 16-bit value to
    8 bits as ``value // 256``: an image whose values stay below 256 decodes to all zeros, one whose values span
    less than about 12 bits to fewer than :data:`MIN_16_BIT_LEVELS` levels (near black), and any 16-bit image
    loses its low 8 bits.
    """
    import mmcv
    try:
        with Image.open(path) as image:
            sixteen_bit = is_16_bit(image)
            image.load()  # Image.open reads the header only: a file cut short fails here
            problems = rescale_problems(path, oriented_size(image), rescales)
    except (OSError, ValueError) as error:
        return [unreadable_image(path, f'{type(error).__name__}: {error}')]
    decoded = mmcv.imread(path, 'color')
    if decoded is None:
        return [unreadable_image(path, "OpenCV, the decoder of mmcv's LoadImageFromFile, decodes no image from it: "
                                       'the file is truncated or corrupt')]
    constant = bool((decoded == decoded[0, 0]).all())
    rgb = tuple(decoded[0, 0, ::-1].tolist())
    if not sixteen_bit:
        if constant:
            problems.append(Problem(path, f'decodes to the constant colour {rgb} (RGB) in every pixel: it carries '
                                          'no signal',
                                    'an image with content (a constant one is usually a broken export: export it '
                                    'again or remove the sample)'))
        return problems
    stored = mmcv.imread(path, 'unchanged')
    kind = 'greyscale' if stored.ndim == 2 else 'colour'
    if stored.ndim == 3:
        stored = stored[..., :3]  # the colour loader drops an alpha channel
    decodes = (f'is a 16-bit {kind} image of values {stored.min()}..{stored.max()}, which the 8-bit colour loader '
               '(value // 256) decodes to')
    valid = ("an 8-bit image, a 16-bit one that spans the 16-bit range, or color_type='unchanged' in "
             'LoadImageFromFile with a normalisation for its range')
    lo, hi = int(decoded.min()), int(decoded.max())
    if constant:
        value = f'the constant {lo}' if kind == 'greyscale' else f'the constant colour {rgb} (RGB)'
        return problems + [Problem(path, f'{decodes} {value} in every pixel: it carries no signal', valid)]
    if hi - lo + 1 < MIN_16_BIT_LEVELS:
        return problems + [Problem(path, f'{decodes} {lo}..{hi}: {hi - lo + 1} of 256 levels, a near-black image '
                                         'that training learns nothing from', valid)]
    return problems + [Problem(path, f'{decodes} {lo}..{hi}', 'an 8-bit image (the loader drops the low 8 bits)',
                               error=False)]


@dataclass(frozen=True)
class ImageCheck:
    """The check of a sample's image (detection and classification datasets) and, for a classification
    dataset of ``num_classes`` classes, of its ``gt_label``."""

    rescales: tuple[Rescale, ...] = ()
    num_classes: int | None = None

    @classmethod
    def of(cls, dataset) -> ImageCheck:
        classified = is_loaded_instance(dataset, 'mmpretrain.datasets.base_dataset', 'BaseDataset')
        classes = dataset.metainfo.get('classes') if classified else None
        return cls(smallest_rescales(dataset.pipeline), None if classes is None else len(classes))

    def inspect(self, info: Mapping) -> tuple[list[Problem], frozenset[int]]:
        """The problems of one sample, and the classes it holds (its labels; a detection sample's are in the
        annotations)."""
        problems = image_problems(info['img_path'], self.rescales)
        if self.num_classes is None or info.get('gt_label') is None:
            return problems, frozenset()
        labels = [int(v) for v in np.atleast_1d(info['gt_label'])]
        bad = [v for v in labels if not 0 <= v < self.num_classes]
        if bad:
            problems.append(Problem(info['img_path'], f'has label {", ".join(map(str, bad))}, not a class of the '
                                                      f'{self.num_classes}',
                                    f'a label in 0..{self.num_classes - 1} (the index of its class in '
                                    "metainfo['classes']): check the ann_file line of this image"))
        return problems, frozenset(v for v in labels if 0 <= v < self.num_classes)

    def __call__(self, info: Mapping) -> list[Problem]:
        return self.inspect(info)[0]
