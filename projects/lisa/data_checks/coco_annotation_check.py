"""The rules of a COCO annotation file as mmdet's ``CocoDataset`` uses it: :class:`CocoAnnotationCheck`.

mmdet drops COCO annotations with a box under 1 px, zero area, a category id the file does not define or an
``image_id`` of no image of the file without a word (an image left without its objects trains as background; a
file with no usable annotation fails with ``need at least one array to concatenate``), and a missing
``segmentation`` surfaces as ``KeyError: 'mask'``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from numbers import Real

import numpy as np

from .data_problems import Problem, ranges


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
                 with_mask: bool, filters_empty: bool, orphans: Sequence[Mapping] = ()) -> None:
        self.ann_file = ann_file
        self.orphans = list(orphans)
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
        content = dataset.coco.dataset
        categories = {c['id']: c.get('name', '?') for c in content.get('categories', [])}
        images = {image.get('id') for image in content.get('images', [])}
        orphans = [ann for ann in content.get('annotations', []) if ann.get('image_id') not in images]
        return cls(dataset.ann_file, categories, dataset.cat_ids, with_mask, filters_empty, orphans)

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
        problems = []
        if self.orphans:
            ids = ', '.join(f'{a.get("id")} (image_id {a.get("image_id")!r})' for a in self.orphans[:10])
            more = f' and {len(self.orphans) - 10} more' if len(self.orphans) > 10 else ''
            problems.append(Problem(self.ann_file, f'{len(self.orphans)} annotations refer to an image_id that no '
                                                   f'image of the file has: annotation id {ids}{more}',
                                    "an image_id of one of the file's images (mmdet drops these annotations)",
                                    error=False))
        if self.annotations and not self.used:
            problems.append(Problem(self.ann_file, f'none of its {self.annotations} annotations is usable (a valid '
                                                   f'box and a category of the dataset\'s classes)',
                                    f'annotations with a valid box and one of the category ids '
                                    f'{ranges(self.class_ids) or "(none)"} (the file\'s categories named as the '
                                    f'dataset\'s classes)'))
        return problems

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
