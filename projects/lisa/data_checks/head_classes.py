"""The classes a model predicts against the classes of its data: :func:`head_class_problems`.

A head built for fewer classes than the data holds fails deep in the loss (``IndexError: Target 36 is out of
bounds``); one built for more trains and scores silently wrong (mmseg's ``IoUMetric`` counts the classes of the
dataset). Every ``num_classes`` of the model config (decode and auxiliary heads, a detector's box and mask heads,
a classifier's head and data preprocessor) must equal the number of the dataset's ``metainfo['classes']``.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .data_problems import Problem

CLASSES_SETTING = "metainfo['classes']"


def _num_classes(cfg, path: str) -> Iterator[tuple[str, int]]:
    items = cfg.items() if isinstance(cfg, Mapping) else enumerate(cfg) if isinstance(cfg, list) else ()
    for key, value in items:
        where = f'{path}.{key}'
        if key == 'num_classes' and isinstance(value, int) and not isinstance(value, bool):
            yield where, value
        elif isinstance(value, (Mapping, list)):
            yield from _num_classes(value, where)


def head_num_classes(cfg: Mapping) -> Iterator[tuple[str, int]]:
    """``(setting, value)`` of every ``num_classes`` of a config's model, e.g. ``('model.decode_head.num_classes',
    150)``; heads given as a list are numbered (``model.auxiliary_head.0.num_classes``). A top-level
    ``data_preprocessor`` counts where the model has none (MMEngine's Runner gives it to the model)."""
    model = cfg.get('model') or {}
    yield from _num_classes(model, 'model')
    if 'data_preprocessor' not in model:
        yield from _num_classes({'data_preprocessor': cfg.get('data_preprocessor')}, '')


def head_class_problems(cfg: Mapping, dataset, present: Iterable[int] = (), where: str = 'dataset'
                        ) -> list[Problem]:
    """The ``num_classes`` settings of the model of ``cfg`` that disagree with ``dataset``'s classes.

    ``present``: the class ids the data holds (label values, instance labels), named where a head lacks them.
    ``where``: the dataset's place in the config, e.g. ``'train_dataloader.dataset'``.
    """
    classes = tuple(dataset.metainfo.get('classes') or ())
    if not classes:
        return []
    present = sorted(set(present))
    problems = []
    for setting, num_classes in head_num_classes(cfg):
        setting = setting.lstrip('.')
        if num_classes == len(classes):
            continue
        beyond = [c for c in present if c >= num_classes]
        held = (f'; the data holds class ids up to {beyond[-1]} (e.g. {beyond[0]} {classes[beyond[0]]!r}), which '
                'this head has no output for' if beyond and beyond[0] < len(classes) else '')
        problems.append(Problem(
            f'{setting}={num_classes}',
            f'the model predicts {num_classes} classes but {where} ({type(dataset).__name__}) has '
            f'{len(classes)} ({CLASSES_SETTING}: {", ".join(map(repr, classes[:5]))}'
            f'{", ..." if len(classes) > 5 else ""}){held}',
            f'{setting}={len(classes)}, or a dataset of {num_classes} classes ({where}.metainfo=dict(classes=...)): '
            'the two settings must agree'))
    return problems
