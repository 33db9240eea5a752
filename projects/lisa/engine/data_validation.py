"""What a valid sample is, and the checks that name each bad one with its file, value and what is valid.

The libraries accept bad data without a word or fail far from its cause:
an ADE20K label value 200 becomes mmseg's target 199 and crashes the loss
(``Target 199 is out of bounds``) in training and gives ``aAcc: nan`` in
validation; an RGB label map or one of another size than its image fails in
``collate``; mmdet's ``CocoDataset`` silently drops COCO annotations with a
box under 1 px, zero area or a category id the file does not define (an
image left without its objects trains as background; a file with no usable
annotation fails with ``need at least one array to concatenate``) and a
missing ``segmentation`` surfaces as ``KeyError: 'mask'``.

The checks, stated by the rules each loader applies:

- :func:`dataset_class_problems`: a dataset class that refuses the config's
  ``metainfo`` classes (mmseg's ``ADE20KDataset``), before it is built;
- :class:`CocoAnnotationCheck`: each raw annotation of a COCO file, while
  the dataset parses the file (:func:`load_dataset`), i.e. at load time;
- :class:`LabelMapCheck` / :class:`ImageCheck`: each label map of an mmseg
  dataset and each image, a sample's files read on their own, against the
  pipeline's resizes (:func:`smallest_rescales`); :func:`check_samples`
  runs them over a whole split in parallel and then lists the classes no
  sample holds (:func:`absent_classes`); ``engine.data_check.Runner`` runs
  them the first time a sample is read.

A :class:`Problem` that the library would crash on or learn wrongly from is
an error; one the library drops by design (e.g. the two zero-height boxes of
the official ``instances_train2017.json``) is a note, listed but not fatal.
"""
from __future__ import annotations

import copy
import inspect
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from multiprocessing import Pool
from numbers import Real

import numpy as np
from mmengine.registry import DATASETS, DefaultScope
from PIL import Image

EXIF_ORIENTATION = 0x0112
TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)
"""EXIF orientations that swap width and height; OpenCV (mmcv's default image decoder) applies them."""
LISTED = 20
"""Problems quoted in an error message; ``tools/check_data.py`` lists all."""
CLASSES = 'metainfo classes'
"""The ``where`` of a split's problem with its classes (:func:`absent_classes`)."""
MIN_16_BIT_LEVELS = 16
"""The fewest 8-bit levels a 16-bit image may decode to. A 16-bit image decoding to fewer spans less than 12 bits
and decodes near black (values 0..1000 to 0..3), which training learns nothing from; 12-bit data (0..4095)
decodes to the 16 levels 0..15."""


class DataError(RuntimeError):
    """A dataset or one of its samples could not be loaded or is invalid; the message names the files."""


class DataProblems(DataError):
    """Invalid annotations found while a dataset loaded; ``problems`` holds them all."""

    def __init__(self, problems: list[Problem], context: str = '') -> None:
        self.problems = problems
        super().__init__(f'{context}{report(problems, limit=LISTED)}')


@dataclass(frozen=True)
class Problem:
    """One bad file or annotation: ``problem`` holds the bad value, ``valid`` what would be valid.

    ``error`` is False for items a library drops by design (listed as notes).
    """

    file: str
    problem: str
    valid: str
    where: str = ''
    error: bool = True

    def __str__(self) -> str:
        where = f' ({self.where})' if self.where else ''
        return f'{self.file}{where}: {self.problem}; valid: {self.valid}'


def report(problems: Sequence[Problem], limit: int | None = None) -> str:
    """The problems as text, errors first; at most ``limit`` of each kind quoted."""
    lines = []
    notes = ' (not fatal: items the library drops, classes a split lacks)'
    for error, title, comment in ((True, 'error', ''), (False, 'note', notes)):
        group = [p for p in problems if p.error == error]
        if not group:
            continue
        lines.append(f'{len(group)} {title}{"s" if len(group) > 1 else ""}{comment}:')
        lines += [f'  {p}' for p in group[:limit]]
        if limit is not None and len(group) > limit:
            lines.append(f'  ... and {len(group) - limit} more: `python tools/check_data.py CONFIG` lists all')
    return '\n'.join(lines)


def ranges(values: Iterable[int]) -> str:
    """Sorted integers as compact ranges: ``1..11, 13..25, 27``."""
    values = sorted(set(values))
    spans: list[list[int]] = []
    for value in values:
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ', '.join(str(a) if a == b else f'{a}..{b}' for a, b in spans)


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


Rescale = tuple[str, tuple[int, int]]
"""An aspect-keeping resize of a pipeline and the smallest target ``scale`` it draws."""


def smallest_rescales(pipeline) -> tuple[Rescale, ...]:
    """The aspect-keeping resizes of a built pipeline, each with the smallest ``scale`` it may draw.

    ``Resize(keep_ratio=True)`` and PVT's ``AlignResize`` use their ``scale``; ``RandomResize`` draws
    ``(int(s0 * r), int(s1 * r))`` for ``r`` in ``ratio_range`` (smallest at ``r = min(ratio_range)``) or
    each edge between two scales (smallest: the minimum of each). mmcv's ``rescale_size`` grows with the
    scale, so the smallest scale gives the smallest image.
    """
    from mmcv.transforms import RandomResize, Resize
    from mmengine.utils import is_seq_of
    found = []
    for transform in getattr(pipeline, 'transforms', []):
        scale = getattr(transform, 'scale', None)
        if isinstance(transform, RandomResize):
            if not getattr(transform.resize, 'keep_ratio', False):
                continue
            if is_seq_of(scale, int) and transform.ratio_range is not None:
                low = min(transform.ratio_range)
                scale = (int(scale[0] * low), int(scale[1] * low))
            elif is_seq_of(scale, Sequence):
                scale = (min(s[0] for s in scale), min(s[1] for s in scale))
        elif not ((isinstance(transform, Resize) and transform.keep_ratio)
                  or _instance(transform, 'projects.lisa.datasets.transforms', 'AlignResize')):
            continue
        if is_seq_of(scale, int) and len(scale) == 2:  # else a scale_factor or a form mmcv itself refuses
            found.append((type(transform).__name__, (int(scale[0]), int(scale[1]))))
    return tuple(found)


def rescale_problems(path: str, size: tuple[int, int], rescales: Sequence[Rescale]) -> list[Problem]:
    """An image that an aspect-keeping resize of the pipeline shrinks to a side of 0 px (OpenCV fails).

    mmcv rescales an ``h x w`` image to ``scale`` by ``f = min(max(scale) / max(h, w), min(scale) / min(h, w))``
    and rounds each side as ``int(side * f + 0.5)``: the short side reaches 0 when
    ``max(h, w) / min(h, w) > 2 max(scale)``.
    """
    from mmcv.image import rescale_size
    height, width = size
    for name, scale in rescales:
        new_w, new_h = rescale_size((width, height), scale)
        if min(new_w, new_h) < 1:
            return [Problem(path, f'is {height}x{width} (HxW), which {name} rescales at its smallest scale {scale} '
                                  f'to {new_h}x{new_w}: OpenCV cannot resize to 0 px and training stops there',
                            f'an aspect ratio (long / short side) of at most 2 x {max(scale)} = {2 * max(scale)} '
                            'for this pipeline: crop or pad the image (and its labels), or remove the sample')]
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
    """The check of a sample's image alone (detection and classification datasets)."""

    rescales: tuple[Rescale, ...] = ()

    @classmethod
    def of(cls, dataset) -> ImageCheck:
        return cls(smallest_rescales(dataset.pipeline))

    def inspect(self, info: Mapping) -> tuple[list[Problem], frozenset[int]]:
        """The problems of one sample, and the classes its files hold (none: they are in the annotations)."""
        return self(info), frozenset()

    def __call__(self, info: Mapping) -> list[Problem]:
        return image_problems(info['img_path'], self.rescales)


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
    :func:`image_problems` against the pipeline's resizes (``rescales``).
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


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and np.isfinite(value)


class CocoAnnotationCheck:
    """The annotations mmdet's ``CocoDataset`` uses, as problems instead of silent drops or crashes.

    Errors: a ``category_id`` the file does not define, a ``bbox`` that is not
    four finite numbers, a missing ``area``, and (where the pipeline loads
    masks) a missing or empty ``segmentation`` or an RLE of another size than
    the image; an image that ``filter_empty_gt`` keeps for its annotations
    while every one of them is dropped (it would train as background); a file
    with no annotation of the dataset's classes at all. Notes (mmdet drops
    them): a box under 1 px, zero area, a box outside the image, polygons
    with fewer than 3 points.
    """

    def __init__(self, ann_file: str, categories: Mapping[int, str], class_ids: Iterable[int],
                 with_mask: bool, filters_empty: bool) -> None:
        self.ann_file = ann_file
        self.categories = dict(categories)
        self.class_ids = set(class_ids)
        self.with_mask = with_mask
        self.filters_empty = filters_empty
        self.annotations = self.used = 0

    @classmethod
    def of(cls, dataset) -> CocoAnnotationCheck:
        """The check for a ``CocoDataset`` while it loads (its ``coco`` and ``cat_ids`` are set)."""
        with_mask = any(getattr(t, 'with_mask', False) for t in getattr(dataset.pipeline, 'transforms', []))
        filters_empty = not dataset.test_mode and bool((dataset.filter_cfg or {}).get('filter_empty_gt'))
        categories = {c['id']: c.get('name', '?') for c in dataset.coco.dataset.get('categories', [])}
        return cls(dataset.ann_file, categories, dataset.cat_ids, with_mask, filters_empty)

    def __call__(self, raw_data_info: Mapping) -> list[Problem]:
        """The problems of one image's annotations (mmdet's ``raw_img_info`` and ``raw_ann_info``)."""
        image, annotations = raw_data_info['raw_img_info'], raw_data_info['raw_ann_info']
        problems: list[Problem] = []
        used = 0
        for ann in annotations:
            if ann.get('ignore', False):
                continue
            self.annotations += 1
            found = self._annotation(ann, image)
            problems += found
            if not found and ann['category_id'] in self.class_ids:
                used += 1
                if self.with_mask:
                    problems += self._segmentation(ann, image)
        self.used += used
        in_classes = [a for a in annotations if a.get('category_id') in self.class_ids]
        if self.filters_empty and in_classes and not used:
            problems.append(Problem(
                self.ann_file, f'none of its {len(in_classes)} annotations of the classes is usable (each '
                'listed), but filter_empty_gt keeps the image, so it would train as background with zero box and '
                'mask loss', 'at least one annotation with a valid box', self._image(image)))
        return problems

    def summary(self) -> list[Problem]:
        """File-level problems, once every image was checked."""
        if self.annotations and not self.used:
            return [Problem(self.ann_file, f'none of its {self.annotations} annotations is usable (a valid box '
                                           f'and a category of the dataset\'s classes)',
                            f'annotations with a valid box and one of the category ids '
                            f'{ranges(self.class_ids) or "(none)"} (the file\'s categories named as the '
                            f'dataset\'s classes)')]
        return []

    @staticmethod
    def _image(image: Mapping) -> str:
        return f'image {image.get("file_name")!r}, id {image.get("id")}'

    def _problem(self, ann: Mapping, image: Mapping, text: str, valid: str, error: bool = True) -> list[Problem]:
        return [Problem(self.ann_file, text, valid, f'annotation id {ann.get("id")}, {self._image(image)}', error)]

    def _annotation(self, ann: Mapping, image: Mapping) -> list[Problem]:
        """The problems of one annotation's category and box; empty if mmdet keeps it."""
        problem = partial(self._problem, ann, image)
        category = ann.get('category_id')
        if category not in self.categories:
            return problem(f'category_id {category!r} is not a category of the file',
                           f'one of its {len(self.categories)} category ids: {ranges(self.categories)}')
        box = ann.get('bbox')
        if not (isinstance(box, Sequence) and len(box) == 4 and all(map(_is_number, box))):
            return problem(f'bbox {box!r} is not [x, y, width, height]', 'four finite numbers in pixels')
        if not _is_number(ann.get('area')):
            return problem(f'area {ann.get("area")!r} is not a number', 'the object\'s area in pixels')
        x, y, w, h = box
        if w < 1 or h < 1:
            return problem(f'bbox {list(box)} has width {w} and height {h}',
                           'width and height of at least 1 px (mmdet drops smaller boxes)', error=False)
        if ann['area'] <= 0:
            return problem(f'area {ann["area"]}', 'a positive area (mmdet drops the annotation)', error=False)
        width, height = image['width'], image['height']
        if min(x + w, width) <= max(x, 0) or min(y + h, height) <= max(y, 0):
            return problem(f'bbox {list(box)} lies outside the {width}x{height} (WxH) image',
                           'a box overlapping the image (mmdet drops the annotation)', error=False)
        return []

    def _segmentation(self, ann: Mapping, image: Mapping) -> list[Problem]:
        """The problems of the ``segmentation`` of an annotation that mmdet uses."""
        problem = partial(self._problem, ann, image)
        valid = ("polygons [[x1, y1, x2, y2, x3, y3, ...], ...] or an RLE {'size': [height, width], 'counts': ...} "
                 '(the pipeline loads masks: LoadAnnotations(with_mask=True))')
        segmentation = ann.get('segmentation')
        if not segmentation:
            return problem('has no segmentation' if segmentation is None else
                           f'segmentation {segmentation!r} is empty', valid)
        if isinstance(segmentation, Mapping):
            size = [image['height'], image['width']]
            if list(segmentation.get('size', ())) != size or not isinstance(segmentation.get('counts'), (list, str)):
                return problem(f"RLE segmentation of size {segmentation.get('size')!r} with counts of type "
                               f"{type(segmentation.get('counts')).__name__}",
                               f'an RLE of the image\'s size {size} (height, width) with list or str counts')
            return []
        if not isinstance(segmentation, list):
            return problem(f'segmentation of type {type(segmentation).__name__}', valid)
        bad = [len(p) if isinstance(p, list) else type(p).__name__ for p in segmentation
               if not (isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 and all(map(_is_number, p)))]
        if bad:
            return problem(f'{len(bad)} of its {len(segmentation)} polygons are not polygons of 3 or more points '
                           f'(lengths {bad})', 'polygons [x1, y1, x2, y2, x3, y3, ...] of finite numbers (mmdet '
                           'drops the others, and ignores the object if none is left)', error=False)
        return []


def leaves(dataset) -> Iterator:
    """The datasets inside dataset wrappers (``datasets`` / ``dataset`` attributes), or ``dataset`` itself."""
    inner = getattr(dataset, 'datasets', None) or ([dataset.dataset] if hasattr(dataset, 'dataset') else [])
    if inner:
        for sub in inner:
            yield from leaves(sub)
    else:
        yield dataset


def _instance(dataset, module: str, name: str) -> bool:
    """``isinstance(dataset, module.name)`` without importing a library that is not in use."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls is not None and isinstance(dataset, cls)


def sample_check(dataset) -> LabelMapCheck | ImageCheck | None:
    """The check of one sample's files for a (leaf) dataset, or None where there is none."""
    if _instance(dataset, 'mmseg.datasets.basesegdataset', 'BaseSegDataset'):
        return LabelMapCheck.of(dataset)
    if _instance(dataset, 'mmdet.datasets.coco', 'CocoDataset'):
        return ImageCheck.of(dataset)
    return None


@contextmanager
def _checking_annotations(dataset, problems: list[Problem]) -> Iterator[None]:
    """While in the block, each image ``dataset`` parses has its raw COCO annotations checked into ``problems``."""
    coco = sys.modules.get('mmdet.datasets.coco')
    if coco is None or not isinstance(dataset, coco.CocoDataset) or \
            type(dataset).parse_data_info is not coco.CocoDataset.parse_data_info:
        yield
        return
    parse, check = dataset.parse_data_info, None

    def parse_checked(raw_data_info: dict):
        nonlocal check
        check = check or CocoAnnotationCheck.of(dataset)
        found = check(raw_data_info)
        problems.extend(found)
        if any(p.error for p in found):  # mmdet may crash on them: parse none, check the remaining images
            raw_data_info = {**raw_data_info, 'raw_ann_info': []}
        return parse(raw_data_info)

    dataset.parse_data_info = parse_checked
    try:
        yield
    finally:
        del dataset.parse_data_info  # an instance attribute: the class's method again, and picklable
        if check is not None:
            problems.extend(check.summary())


class _EmptySplit(Exception):
    """A dataset loaded no sample (mmengine's serialisation of 0 samples would crash)."""


@contextmanager
def _stopping_when_empty(dataset) -> Iterator[None]:
    """While in the block, serialising ``dataset`` with no sample raises :class:`_EmptySplit`."""
    serialize = getattr(dataset, '_serialize_data', None)
    if serialize is None:
        yield
        return

    def serialize_nonempty():
        if len(dataset.data_list) == 0:
            raise _EmptySplit
        return serialize()

    dataset._serialize_data = serialize_nonempty
    try:
        yield
    finally:
        del dataset._serialize_data  # an instance attribute: the class's method again, and picklable


def _registered(cfg: Mapping):
    """The class a dataset config builds (None if unknown)."""
    cls = cfg.get('type')
    if isinstance(cls, str):
        with DATASETS.switch_scope_and_registry(None) as registry:  # the default scope's registry, as build does
            cls = registry.get(cls)
    return cls


def dataset_class_problems(cfg: Mapping) -> list[Problem]:
    """Dataset configs whose class refuses their ``metainfo`` classes, with the class that takes them.

    An mmseg dataset of a fixed label set (e.g. ``ADE20KDataset``) takes only a subset of its own classes
    (mmseg raises ``... is not a subset of classes ... in METAINFO``); ``BaseSegDataset`` takes any, given
    the file suffixes and ``reduce_zero_label`` that the fixed class sets itself.
    """
    problems = []
    for leaf in _leaf_cfgs(cfg):
        cls, classes = _registered(leaf), (leaf.get('metainfo') or {}).get('classes')  # the lookup imports mmseg's
        base = getattr(sys.modules.get('mmseg.datasets.basesegdataset'), 'BaseSegDataset', None)
        if base is None or classes is None or not isinstance(cls, type) or not issubclass(cls, base) or cls is base:
            continue
        own = cls.METAINFO.get('classes', ())
        if set(classes) <= set(own):
            continue
        defaults = {name: leaf.get(name, parameter.default)
                    for name, parameter in inspect.signature(cls.__init__).parameters.items()
                    if name in ('img_suffix', 'seg_map_suffix', 'reduce_zero_label')}
        arguments = ', '.join(f'{k}={v!r}' for k, v in defaults.items())
        problems.append(Problem(
            f'{cls.__name__} {leaf.get("data_root")!r}',
            f'{cls.__name__} takes only its own {len(own)} classes (or a subset), but metainfo classes is '
            f'{tuple(classes)!r}', f"type='BaseSegDataset', {arguments}, with the same data_root, data_prefix, "
            'metainfo and pipeline (it takes any classes)'))
    return problems


def _lazy(cfg: Mapping) -> dict:
    """A copy of a dataset config that builds without loading, wrappers included."""
    cfg = dict(copy.deepcopy(cfg))
    cls = _registered(cfg)
    # A subclass may pass it on through **kwargs (mmdet's BaseDetDataset): ask each class of the MRO.
    if cls is not None and any('lazy_init' in inspect.signature(c.__init__).parameters
                               for c in inspect.getmro(cls) if '__init__' in vars(c)):
        cfg['lazy_init'] = True
    if isinstance(cfg.get('dataset'), Mapping):
        cfg['dataset'] = _lazy(cfg['dataset'])
    if isinstance(cfg.get('datasets'), list):
        cfg['datasets'] = [_lazy(sub) for sub in cfg['datasets']]
    return cfg


def load_dataset(cfg: Mapping):
    """Build and load the dataset of ``cfg``, checking COCO annotations as they are parsed.

    Returns the dataset and its load-time problems. Raises
    :class:`DataProblems` if its class refuses its classes
    (:func:`dataset_class_problems`) or loading failed where problems had
    been found (they are the cause, e.g. no usable annotation left).
    """
    problems = dataset_class_problems(cfg)
    if problems:
        raise DataProblems(problems, f'{cfg.get("type")} cannot be built:\n')
    dataset = DATASETS.build(_lazy(cfg))
    try:
        with ExitStack() as stack:
            for leaf in leaves(dataset):
                stack.enter_context(_checking_annotations(leaf, problems))
                stack.enter_context(_stopping_when_empty(leaf))
            if hasattr(dataset, 'full_init'):
                dataset.full_init()
    except _EmptySplit as error:
        raise DataProblems([*problems, empty_split(cfg)]) from error
    except Exception as error:
        if any(p.error for p in problems):
            raise DataProblems(problems, f'{cfg.get("type")} failed to load ({type(error).__name__}: {error}):\n'
                               ) from error
        raise
    return dataset, problems


def _check_infos(check: LabelMapCheck | ImageCheck, infos: list[Mapping]) -> tuple[list[Problem], set[int]]:
    """The problems of the samples ``infos``, and the classes their files and instances hold."""
    problems, classes = [], set()
    for info in infos:
        found, held = check.inspect(info)
        problems += found
        classes |= held
        classes |= {i['bbox_label'] for i in info.get('instances', ()) if not i.get('ignore_flag', 0)}
    return problems, classes


def absent_classes(dataset, present: set[int]) -> list[Problem]:
    """The classes of ``dataset.metainfo['classes']`` that no sample holds (``present``: the loaded class ids).

    A split may lack a rare class (a note); one holding fewer than two of its classes (only the ignore
    index, or all classes but one) cannot teach a model to tell them apart (an error). Under
    ``reduce_zero_label`` a missing last class is the sign of maps that store class ``i`` as ``i``.
    """
    classes = dataset.metainfo['classes']
    label_map = getattr(dataset, 'label_map', None)
    if label_map:  # custom classes: the original ids the check counted, as mmseg maps them
        present = {label_map.get(c, c) for c in present}
    absent = [i for i in range(len(classes)) if i not in present]
    if not absent:
        return []
    if hasattr(dataset, 'reduce_zero_label'):
        where = 'label maps'
        advice = ("label maps that hold every class: check that metainfo['classes'] lists their classes in the "
                  'order of their stored values')
        if dataset.reduce_zero_label and len(classes) - 1 in absent:  # maps storing 0..K-1 load as ignored, 0..K-2
            advice += (f'; reduce_zero_label=True ignores a stored 0 and loads a stored v as class v - 1, so class '
                       f'{len(classes) - 1} needs the stored value {len(classes)}: if the maps store class i as i '
                       '(0 a class, e.g. background), set reduce_zero_label=False')
    else:
        where = 'instances'
        advice = ("instances of every class: check that metainfo['classes'] names the annotation file's "
                  'categories (they are matched by name)')
    listed = ', '.join(f'class {i} {classes[i]!r}' for i in absent[:10])
    more = f' and {len(absent) - 10} more' if len(absent) > 10 else ''
    error = len(classes) - len(absent) < min(2, len(classes))
    return [Problem(f'{type(dataset).__name__} {getattr(dataset, "data_root", "")!r}',
                    f'{len(absent)} of its {len(classes)} classes never occur in the split\'s {where}: '
                    f'{listed}{more}', advice + ('' if error else ' (a split may lack a rare class)'), CLASSES, error)]


def check_samples(dataset, workers: int = 0, chunk: int = 64) -> list[Problem]:
    """The problems of every sample's files, checked in ``workers`` processes (0: one per CPU, 1: here),
    and the classes no sample of a leaf dataset holds (:func:`absent_classes`)."""
    problems = []
    for leaf in leaves(dataset):
        check = sample_check(leaf)
        if check is None:
            continue
        infos = [leaf.get_data_info(i) for i in range(len(leaf))]
        chunks = [infos[i:i + chunk] for i in range(0, len(infos), chunk)]
        workers = workers or os.cpu_count() or 1
        if workers == 1 or len(chunks) <= 1:  # an empty split has no chunk (reported by check_config_data)
            parts = list(map(partial(_check_infos, check), chunks))
        else:
            with Pool(min(workers, len(chunks))) as pool:
                parts = list(pool.imap(partial(_check_infos, check), chunks))
        problems += [p for found, _ in parts for p in found]
        if infos:
            problems += absent_classes(leaf, set().union(*(classes for _, classes in parts)))
    return problems


def check_config_data(cfg: Mapping, loaders: Sequence[str], workers: int = 0) -> dict[str, list[Problem]]:
    """Load the dataset of each named dataloader (e.g. ``'train_dataloader'``) and check every sample.

    Returns the problems per dataloader.
    """
    found = {}
    for loader in loaders:
        with DefaultScope.overwrite_default_scope(cfg.get('default_scope')):
            try:
                dataset, problems = load_dataset(cfg[loader]['dataset'])
            except DataProblems as error:
                found[loader] = error.problems
                continue
        if len(dataset) == 0:  # a dataset that does not serialise its samples loads empty
            problems.append(empty_split(cfg[loader]['dataset']))
        found[loader] = problems + check_samples(dataset, workers)
    return found


def empty_split(cfg: Mapping) -> Problem:
    """The problem of a dataset config that loads no sample."""
    where = [d.get('data_root') or d.get('ann_file') for d in _leaf_cfgs(cfg)]
    return Problem(f'{cfg.get("type")} {where}', 'has no samples (no image found, or every one filtered out)',
                   'a split with at least one sample: check data_root, data_prefix and ann_file')


def _leaf_cfgs(cfg: Mapping) -> list[Mapping]:
    """The dataset configs inside a (possibly wrapping) dataset config."""
    inner = cfg.get('datasets') or ([cfg['dataset']] if isinstance(cfg.get('dataset'), Mapping) else None)
    return [leaf for c in inner for leaf in _leaf_cfgs(c)] if inner else [cfg]
