"""A missing ImageNet checkpoint, named before a dense run starts, with the two ways forward.

Every dense config of the paper loads its backbone from ``pretrain/<model>_in1k.pth``, the
checkpoint of a 300-epoch ImageNet-1K run of ``configs/classification``. Without it a run can
either make it (pretrain the classifier) or start from the public softmax ImageNet weights
that the mm libraries' own configs load: the ``*_softmax-in1k-pre_*`` sibling of each dense
config (the tensors LiSA / FLatten add start as when training from scratch).
"""
from __future__ import annotations

import os.path as osp
import re
from collections.abc import Iterator, Mapping

from mmengine.config import Config

from projects.lisa.models.backbones.loading import is_url

#: ``pretrain/<model>_in1k.pth`` -> the ImageNet-1K classification config that writes it.
CLASSIFIERS: dict[str, str] = {
    'pvt-t': 'pvt-tiny_softmax', 'flatten-pvt-t': 'pvt-tiny_flatten', 'lisa-pvt-t': 'pvt-tiny_lisa',
    'swin-t': 'swin-tiny_softmax', 'flatten-swin-t': 'swin-tiny_flatten', 'lisa-swin-t': 'swin-tiny_lisa',
    'biformer-s': 'biformer-small_bra', 'lisa-biformer-s': 'biformer-small_lisa',
}


def pretrained_checkpoints(node, where: str = 'model') -> Iterator[tuple[str, str]]:
    """``(config key, path)`` of every ``Pretrained`` init_cfg's checkpoint under ``node``."""
    if isinstance(node, Mapping):
        if node.get('type') == 'Pretrained' and isinstance(node.get('checkpoint'), str):
            yield where, node['checkpoint']
        for key, value in node.items():
            yield from pretrained_checkpoints(value, f'{where}.{key}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from pretrained_checkpoints(value, f'{where}.{i}')


def softmax_start_config(config_file: str) -> str | None:
    """The ``*_softmax-in1k-pre_*`` sibling of a dense config of this project, if there is one."""
    head, name = osp.split(config_file)
    parts = name.split('_')
    if len(parts) < 3 or 'softmax-in1k-pre' in parts:
        return None
    sibling = osp.join(head, '_'.join([*parts[:2], 'softmax-in1k-pre', *parts[2:]]))
    return sibling if osp.isfile(sibling) else None


def missing_pretrained(cfg: Config) -> str | None:
    """What to do about the first local ``Pretrained`` checkpoint of ``cfg.model`` that does not exist;
    None when every one exists (URLs are the mm libraries' to fetch)."""
    for key, path in pretrained_checkpoints(cfg.get('model')):
        if is_url(path) or osp.exists(path):
            continue
        ways = []
        model = re.fullmatch(r'(.+)_in1k\.pth', osp.basename(path))
        classifier = model and CLASSIFIERS.get(model[1])
        if classifier:
            ways.append(f'pretrain it: train configs/classification/{classifier}_8xb128_in1k.py on ImageNet-1K '
                        f'and copy its last checkpoint to {path} (README: ImageNet pretraining)')
        else:
            ways.append(f'make it: a checkpoint of this backbone (keys under {key}\'s prefix)')
        sibling = softmax_start_config(cfg.filename) if cfg.filename else None
        if sibling:
            ways.append(f'start from the public softmax ImageNet weights instead: {sibling}')
        else:
            ways.append("start from a softmax checkpoint: point init_cfg's checkpoint at it and add "
                        "allow_new=['lisa_from_softmax']")
        steps = '\n'.join(f'  {i}. {way}' for i, way in enumerate(ways, 1))
        return f'{key}.checkpoint = {path!r} does not exist. Two ways forward:\n{steps}'
    return None
