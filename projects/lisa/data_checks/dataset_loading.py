"""Building and loading a dataset from its config with its annotations checked: :func:`load_dataset`.

COCO annotations are checked (:class:`.CocoAnnotationCheck`) while the dataset parses its file, i.e. at load
time, and an annotation file that is not valid JSON is named (:func:`unparsable_file`); a dataset class that
refuses the config's ``metainfo`` classes (mmseg's ``ADE20KDataset``) is named before it is built
(:func:`dataset_class_problems`), and a split that loads no sample is named (:func:`empty_split`) before
mmengine's serialisation of 0 samples crashes. Also the leaf datasets inside dataset wrappers: :func:`leaves`
of a built dataset, :func:`leaf_cfgs` of a config.
"""
from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

from mmengine.registry import DATASETS

from .coco_annotation_check import CocoAnnotationCheck
from .data_problems import DataProblems, Problem
from .loaded_classes import loaded_class


def leaves(dataset) -> Iterator:
    """The datasets inside dataset wrappers (``datasets`` / ``dataset`` attributes), or ``dataset`` itself."""
    inner = getattr(dataset, 'datasets', None) or ([dataset.dataset] if hasattr(dataset, 'dataset') else [])
    if inner:
        for sub in inner:
            yield from leaves(sub)
    else:
        yield dataset


def leaf_cfgs(cfg: Mapping) -> list[Mapping]:
    """The dataset configs inside a (possibly wrapping) dataset config."""
    inner = cfg.get('datasets') or ([cfg['dataset']] if isinstance(cfg.get('dataset'), Mapping) else None)
    return [leaf for c in inner for leaf in leaf_cfgs(c)] if inner else [cfg]


@contextmanager
def _replacing(dataset, method: str, replacement) -> Iterator[None]:
    """While in the block, ``dataset.<method>`` is ``replacement`` (an instance attribute, deleted after it: the
    class's method again, and the dataset picklable)."""
    setattr(dataset, method, replacement)
    try:
        yield
    finally:
        delattr(dataset, method)


@contextmanager
def _checking_annotations(dataset, problems: list[Problem]) -> Iterator[None]:
    """While in the block, each image ``dataset`` parses has its raw COCO annotations checked into ``problems``."""
    coco = loaded_class('mmdet.datasets.coco', 'CocoDataset')
    if coco is None or not isinstance(dataset, coco) or type(dataset).parse_data_info is not coco.parse_data_info:
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

    try:
        with _replacing(dataset, 'parse_data_info', parse_checked):
            yield
    finally:
        if check is not None:
            problems.extend(check.summary())


def unparsable_file(path: str, error: json.JSONDecodeError) -> Problem:
    """The problem of an annotation file that is not valid JSON, saying where it breaks off."""
    cut = not error.doc[error.pos:].strip() or error.msg.startswith('Unterminated')
    return Problem(path, f'is not valid JSON (JSONDecodeError: {error}, of its {len(error.doc)} characters)'
                         + (': the file ends before its JSON does, so it is cut short' if cut else ''),
                   'a complete JSON annotation file: copy, download or export it again')


@contextmanager
def _naming_the_annotation_file(dataset) -> Iterator[None]:
    """While in the block, ``dataset``'s annotation file that is not valid JSON raises :class:`.DataProblems`
    naming it (the JSON parser names no file)."""
    load, ann_file = getattr(dataset, 'load_data_list', None), getattr(dataset, 'ann_file', None)
    if load is None or not ann_file:
        yield
        return

    def load_naming_the_file():
        try:
            return load()
        except json.JSONDecodeError as error:
            raise DataProblems([unparsable_file(ann_file, error)]) from error

    with _replacing(dataset, 'load_data_list', load_naming_the_file):
        yield


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

    with _replacing(dataset, '_serialize_data', serialize_nonempty):
        yield


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
    for leaf in leaf_cfgs(cfg):
        cls, classes = _registered(leaf), (leaf.get('metainfo') or {}).get('classes')  # the lookup imports mmseg's
        base = loaded_class('mmseg.datasets.basesegdataset', 'BaseSegDataset')
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
    :class:`.DataProblems` if its class refuses its classes
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
                stack.enter_context(_naming_the_annotation_file(leaf))
            if hasattr(dataset, 'full_init'):
                dataset.full_init()
    except _EmptySplit as error:
        raise DataProblems([*problems, empty_split(cfg)]) from error
    except DataProblems as error:
        raise DataProblems([*problems, *error.problems]) from error
    except Exception as error:
        if any(p.error for p in problems):
            raise DataProblems(problems, f'{cfg.get("type")} failed to load ({type(error).__name__}: {error}):\n'
                               ) from error
        raise
    return dataset, problems

def empty_split(cfg: Mapping) -> Problem:
    """The problem of a dataset config that loads no sample."""
    where = [d.get('data_root') or d.get('ann_file') for d in leaf_cfgs(cfg)]
    return Problem(f'{cfg.get("type")} {where}', 'has no samples (no image found, or every one filtered out)',
                   'a split with at least one sample: check data_root, data_prefix and ann_file')
