"""The rule of a classification split's class folders: :func:`class_folder_problems`.

mmpretrain reads ``<prefix>/<class folder>/<image>`` with each image's label from the ``ann_file`` (ImageNet's
``meta/train.txt``) or from the sorted folder names, and trusts it: a line of the ``ann_file`` with another
folder's label, or ``metainfo['classes']`` in another order than the folders, trains every image of a class as
another class without a word.
"""
from __future__ import annotations

import os.path as osp
from collections.abc import Mapping, Sequence

from .data_problems import Problem, ranges


def _folder(path: str, prefix: str) -> str:
    """The first folder of ``path`` under ``prefix`` ('' for an image directly in it)."""
    relative = osp.relpath(path, prefix) if prefix else path
    return relative.replace('\\', '/').split('/')[0] if '/' in relative.replace('\\', '/') else ''


def class_folder_problems(dataset, infos: Sequence[Mapping]) -> list[Problem]:
    """The class folders of a classification split that disagree with its labels or ``metainfo['classes']``.

    Each folder must hold one label and each label lie in one folder; where the folders are named as the
    classes (e.g. ImageNet WordNet ids), the folder of label ``i`` must be ``classes[i]``.
    """
    classes = tuple(dataset.metainfo.get('classes') or ())
    prefix = getattr(dataset, 'img_prefix', '') or ''
    labels_of: dict[str, set[int]] = {}
    for info in infos:  # a label that is no class is the sample check's
        label = info.get('gt_label')
        if isinstance(label, int) and (not classes or 0 <= label < len(classes)):
            labels_of.setdefault(_folder(info['img_path'], prefix), set()).add(label)
    if not labels_of or '' in labels_of:  # not a folder-per-class layout
        return []
    where = f'{type(dataset).__name__} {prefix!r}'
    problems = []
    folders_of: dict[int, list[str]] = {}
    for folder, labels in sorted(labels_of.items()):
        for label in labels:
            folders_of.setdefault(label, []).append(folder)
        if len(labels) > 1:
            problems.append(Problem(where, f'class folder {folder!r} holds images of {len(labels)} labels '
                                           f'({ranges(labels)})', 'one label per class folder: check the ann_file '
                                           'lines of its images', 'class folders'))
    for label, folders in sorted(folders_of.items()):
        if len(folders) > 1:
            problems.append(Problem(where, f'label {label} is given to images of {len(folders)} class folders '
                                           f'({", ".join(map(repr, folders[:10]))})',
                                    'one class folder per label: check the ann_file lines of their images',
                                    'class folders'))
    if set(labels_of) <= set(classes):  # folders named as the classes: their order must be the labels'
        named = [(folder, label) for folder, labels in sorted(labels_of.items()) for label in labels
                 if 0 <= label < len(classes) and classes[label] != folder]
        if named:
            listed = ', '.join(f'{folder!r} has label {label} ({classes[label]!r})' for folder, label in named[:5])
            problems.append(Problem(where, f'{len(named)} class folders hold another class\'s label: {listed}',
                                    "the label of folder classes[i] is i: list metainfo['classes'] in the order "
                                    'of the labels (mmpretrain sorts the folder names), or fix the ann_file',
                                    'class folders'))
    return problems
