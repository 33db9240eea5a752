"""Data errors that say which file is wrong and how to fix it.

MMEngine builds the datasets deep inside ``Runner.train()`` / ``Runner.test()``:
a missing ADE20K root surfaces as ``[Errno 2] No such file or directory:
'.../images/training'``, a corrupt COCO annotation file as a bare
``JSONDecodeError`` and a corrupt label map as a Pillow error about a
``BytesIO`` object, naming no file. ``tools/train.py`` and ``tools/test.py``
therefore

1. :func:`check_data_roots`: check the roots, folders and annotation files of
   the datasets a run uses before building anything, and report what is
   missing together with how to prepare that dataset;
2. build the :class:`Runner` of this module, whose datasets add the dataset's
   annotation file (while loading it) or the sample's files (while loading a
   sample) to any error, and which stops on invalid data
   (:mod:`.dataset_loading`, :mod:`.split_check`): COCO annotations are checked while their file
   loads, each sample's label map and image the first time the sample is read,
   so an image that cannot be decoded in full is named before OpenCV decodes
   nothing from it (or, OpenCV 4, its missing rows grey). The samples of a
   validation or test split are all checked before its loop, so an invalid one
   stops the run before the first sample is evaluated, not halfway through.
"""
from __future__ import annotations

import logging
import os.path as osp
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.runner import Runner as MMEngineRunner

from .data_problems import LISTED, DataError, report
from .dataset_loading import leaf_cfgs, leaves, load_dataset
from .image_check import ImageCheck
from .label_map_check import LabelMapCheck
from .split_check import CLASSES, check_samples, sample_check

PREPARATION: dict[str, str] = {
    'ADE20KDataset': (
        'ADE20K is expected as data/ade/ADEChallengeData2016/{images,annotations}/{training,validation}: '
        'unzip the official ADEChallengeData2016.zip (from the MIT Scene Parsing Benchmark, '
        'http://sceneparsing.csail.mit.edu) into data/ade, or write a small synthetic copy in the same '
        'format with `python tools/generate_data.py ade20k --out data`'),
    'CocoDataset': (
        'COCO is expected as data/coco/{train2017,val2017} and data/coco/annotations/instances_{train,val}2017.json: '
        'unzip the official train2017.zip, val2017.zip and annotations_trainval2017.zip (https://cocodataset.org) '
        'into data/coco, or write a small synthetic copy in the same format with '
        '`python tools/generate_data.py coco --out data`'),
    'ImageNet': (
        'ImageNet-1K is expected as data/imagenet/{train,val}/<class>/*.JPEG with data/imagenet/meta/{train,val}.txt '
        '(mmpretrain layout), or write a small synthetic copy in the same format with '
        '`python tools/generate_data.py imagenet --out data`'),
}
"""How to prepare each dataset type, quoted when its files are missing."""

_EVALUATING: ContextVar[bool] = ContextVar('evaluating', default=False)
"""Whether the dataloader being built is a validation or test loop's."""

PREPARATION_ELSEWHERE = ("see the dataset preparation guide of the library that defines it "
                         "(mmseg / mmdet / mmpretrain docs: 'Prepare datasets')")


def _join(root: str | None, path: str) -> str:
    """Join like MMEngine's ``BaseDataset``: relative paths are taken under ``data_root``."""
    return osp.join(root, path) if root and not osp.isabs(path) else path


def dataset_files(dataset: Mapping) -> list[str]:
    """The folders and annotation files a dataset config reads, as MMEngine resolves them."""
    root = dataset.get('data_root')
    files = [root] if root else []
    prefix = dataset.get('data_prefix') or {}
    prefixes = [prefix] if isinstance(prefix, str) else prefix.values()  # mmpretrain: one folder
    files += [_join(root, p) for p in prefixes if isinstance(p, str) and p]
    if dataset.get('ann_file'):
        files.append(_join(root, dataset['ann_file']))
    return files


def check_data_roots(cfg: Config, loaders: tuple[str, ...]) -> None:
    """Raise ``FileNotFoundError`` for the first missing data path of ``loaders`` in ``cfg``.

    Checks every dataset of the named dataloaders (e.g. ``'train_dataloader'``)
    and the ``ann_file`` of the matching evaluators. The message names the
    missing path, the config entry that points there and how to prepare the
    dataset (:data:`PREPARATION`).
    """
    for loader in loaders:
        if not cfg.get(loader):
            continue
        for dataset in leaf_cfgs(cfg[loader]['dataset']):
            for path in dataset_files(dataset):
                if not osp.exists(path):
                    kind = dataset.get('type', '?')
                    raise FileNotFoundError(
                        f'{loader}: {kind} data not found: {path!r} does not exist (data_root='
                        f'{dataset.get("data_root")!r}). {PREPARATION.get(kind, PREPARATION_ELSEWHERE)}; '
                        f'or point data_root elsewhere with --cfg-options.')
        evaluator = cfg.get(loader.replace('_dataloader', '_evaluator'))
        for metric in evaluator if isinstance(evaluator, list) else [evaluator]:
            if isinstance(metric, Mapping) and metric.get('ann_file') and not osp.exists(metric['ann_file']):
                raise FileNotFoundError(f'{loader}: the annotation file of {metric.get("type")}, '
                                        f'{metric["ann_file"]!r}, does not exist.')


class SampleFilesInErrors:
    """A built dataset whose ``__getitem__`` errors name the sample's files.

    With a ``check``, a sample's files are checked the first time this
    process reads it; a problem raises :class:`DataError`.
    Like MMEngine's own ``_SlicedDataset``, every other attribute is the
    wrapped dataset's, so samplers, loops and metrics see the dataset itself.
    """

    def __init__(self, dataset, check: LabelMapCheck | ImageCheck | None = None) -> None:
        self._dataset = dataset
        self._check = check
        self._checked: set[int] = set()

    def __getattr__(self, name: str):
        if name in ('_dataset', '_check', '_checked'):  # not yet set (unpickling)
            raise AttributeError(name)
        return getattr(self._dataset, name)

    def __len__(self) -> int:
        return len(self._dataset)

    @property
    def wrapped(self):
        """The dataset itself."""
        return self._dataset

    def __deepcopy__(self, memo: dict) -> SampleFilesInErrors:
        return self  # MMEngine deep-copies dataloader configs; the built dataset is shared, not copied

    def check_all(self, workers: int = 1) -> None:
        """Check every sample now, in ``workers`` processes: raise :class:`DataError` listing the invalid ones."""
        if self._check is None:
            return
        problems = [p for p in check_samples(self._dataset, workers) if p.error and p.where != CLASSES]
        if problems:
            raise DataError(f'{type(self._dataset).__name__} ({len(self)} samples) is invalid, nothing was '
                            f'evaluated:\n{report(problems, limit=LISTED)}')
        self._checked.update(range(len(self)))

    def __getitem__(self, idx: int):
        if self._check is not None and idx not in self._checked:
            problems = [p for p in self._check(self._dataset.get_data_info(idx)) if p.error]  # notes pass
            if problems:
                raise DataError(f'{type(self._dataset).__name__} sample {idx} is invalid:\n{report(problems)}\n'
                                '(`python tools/check_data.py CONFIG` lists every invalid sample of a config)')
            self._checked.add(idx)
        try:
            return self._dataset[idx]
        except Exception as error:
            info = self._dataset.get_data_info(idx)
            files = {k: v for k, v in info.items() if k.endswith('path') and isinstance(v, str)}
            raise DataError(f'{type(self._dataset).__name__} sample {idx} failed to load ({files}): '
                            f'{type(error).__name__}: {error}') from error


def _one_sample_check(dataset) -> LabelMapCheck | ImageCheck | None:
    """The sample check shared by every dataset inside ``dataset``; None where there is none."""
    checks = {sample_check(leaf) for leaf in leaves(dataset)}
    if len(checks) > 1:
        print_log(f'{type(dataset).__name__} mixes datasets with different label rules ({checks}); their samples '
                  'are not checked when read: run tools/check_data.py on the config first', level=logging.WARNING)
        return None
    return checks.pop()


@contextmanager
def _evaluating() -> Iterator[None]:
    token = _EVALUATING.set(True)
    try:
        yield
    finally:
        _EVALUATING.reset(token)


class Runner(MMEngineRunner):
    """MMEngine's ``Runner`` whose datasets name the files behind a loading error and stop on invalid data
    (an evaluation split's before its loop)."""

    def build_val_loop(self, loop):
        with _evaluating():
            return super().build_val_loop(loop)

    def build_test_loop(self, loop):
        with _evaluating():
            return super().build_test_loop(loop)

    @staticmethod
    def build_dataloader(dataloader, seed: int | None = None, diff_rank_seed: bool = False):
        if isinstance(dataloader, Mapping) and isinstance(dataloader.get('dataset'), Mapping):
            dataset_cfg = dataloader['dataset']
            try:
                dataset, problems = load_dataset(dataset_cfg)
            except (OSError, ValueError) as error:  # missing or unreadable files, malformed annotations
                where = [dict(data_root=d.get('data_root'), ann_file=_join(d.get('data_root'), d['ann_file']))
                         if d.get('ann_file') else dict(data_root=d.get('data_root')) for d in leaf_cfgs(dataset_cfg)]
                raise DataError(f'{dataset_cfg.get("type")} {where} failed to load: '
                                f'{type(error).__name__}: {error}') from error
            if any(p.error for p in problems):
                raise DataError(f'{dataset_cfg.get("type")} is invalid:\n{report(problems, limit=LISTED)}')
            if problems:
                print_log(f'{dataset_cfg.get("type")}: {report(problems, limit=LISTED)}', level=logging.WARNING)
            checked = SampleFilesInErrors(dataset, _one_sample_check(dataset))
            if _EVALUATING.get():
                checked.check_all(max(1, dataloader.get('num_workers') or 0))
            dataloader = {**dataloader, 'dataset': checked}
        return MMEngineRunner.build_dataloader(dataloader, seed=seed, diff_rank_seed=diff_rank_seed)
