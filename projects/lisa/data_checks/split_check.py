"""The check of every sample of a split: :func:`check_config_data` loads the dataset of each named dataloader
(:func:`.load_dataset`, which checks COCO annotations) and :func:`check_samples` checks each sample's files in
parallel with the check its dataset needs (:func:`sample_check`: :class:`.LabelMapCheck` for an mmseg dataset,
:class:`.ImageCheck` for a COCO or mmpretrain one), then lists the classes no sample holds
(:func:`absent_classes`), the class folders that disagree with the labels (:func:`.class_folder_problems`) and
the model's ``num_classes`` settings that disagree with the data (:func:`.head_class_problems`); an evaluation
split also has each image's memory estimated (:class:`.EvalMemory`).
``data_check.Runner`` runs the same sample checks the first time a sample is read.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from multiprocessing import Pool

from mmengine.registry import DefaultScope

from .class_folder_check import class_folder_problems
from .data_problems import DataProblems, Problem
from .dataset_loading import empty_split, leaves, load_dataset
from .eval_memory import EvalMemory, memory_limit
from .head_classes import head_class_problems
from .image_check import ImageCheck
from .label_map_check import LabelMapCheck
from .loaded_classes import is_loaded_instance

CLASSES = 'metainfo classes'
"""The ``where`` of a split's problem with its classes (:func:`absent_classes`)."""
EVALUATED = ('val_dataloader', 'test_dataloader')
"""The dataloaders whose images are evaluated at full resolution (their memory is estimated)."""


def _is_classification(dataset) -> bool:
    return is_loaded_instance(dataset, 'mmpretrain.datasets.base_dataset', 'BaseDataset')


def sample_check(dataset) -> LabelMapCheck | ImageCheck | None:
    """The check of one sample's files for a (leaf) dataset, or None where there is none."""
    if is_loaded_instance(dataset, 'mmseg.datasets.basesegdataset', 'BaseSegDataset'):
        return LabelMapCheck.of(dataset)
    if is_loaded_instance(dataset, 'mmdet.datasets.coco', 'CocoDataset') or _is_classification(dataset):
        return ImageCheck.of(dataset)
    return None


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
    elif _is_classification(dataset):
        where = 'labels'
        advice = "images of every class: check that metainfo['classes'] lists the classes of the labels"
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


def check_samples(dataset, workers: int = 0, chunk: int = 64, cfg: Mapping | None = None, where: str = 'dataset',
                  memory: int | None = None) -> list[Problem]:
    """The problems of every sample's files, checked in ``workers`` processes (0: one per CPU, 1: here),
    the classes no sample of a leaf dataset holds (:func:`absent_classes`) and a classification split's class
    folders (:func:`.class_folder_problems`). With the config ``cfg``, also its model's ``num_classes``
    against each leaf's classes (``where``: the dataset's place in ``cfg``); with ``memory`` (bytes), each
    image whose full-resolution evaluation would need more (:class:`.EvalMemory`)."""
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
        present = set().union(*(classes for _, classes in parts))
        if infos:
            problems += absent_classes(leaf, present)
        if _is_classification(leaf):
            problems += class_folder_problems(leaf, infos)
        if cfg is not None:
            problems += head_class_problems(cfg, leaf, present, where)
            estimate = EvalMemory.of(cfg, leaf) if memory is not None else None
            if estimate is not None:
                problems += estimate.problems(infos, memory, where)
    return problems


def check_config_data(cfg: Mapping, loaders: Sequence[str], workers: int = 0,
                      memory: int | None = None) -> dict[str, list[Problem]]:
    """Load the dataset of each named dataloader (e.g. ``'train_dataloader'``) and check every sample, the
    model's ``num_classes`` against its classes, and (:data:`EVALUATED` loaders) each image's evaluation
    against ``memory`` bytes (default: this machine's, :func:`.memory_limit`).

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
        budget = (memory or memory_limit()) if loader in EVALUATED else None
        found[loader] = problems + check_samples(dataset, workers, cfg=cfg, where=f'{loader}.dataset', memory=budget)
    return found
