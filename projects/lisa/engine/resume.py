"""What a resumed run needs beyond MMEngine's checkpoint: the random state, and an intact file to start from.

MMEngine 0.10.7 saves weights, optimizer, schedulers and the iteration; the loop
then replays the data loader to the saved position (the sampler's order is a
function of the seed and the epoch). It does not save the random number
generators, so dropout, drop-path and the random augmentations of the main
process draw different numbers after a resume. :func:`rng_state` /
:func:`set_rng_state` capture and restore Python's, NumPy's and torch's (CPU and
CUDA) generators; :class:`~.checkpoint_hook.SafeCheckpointHook` stores one state
per rank and restores it exactly where the uninterrupted run stood: after the
replay of the data loader, before the first new batch is read.

:func:`find_resumable_checkpoint` picks the newest checkpoint of a work dir that
loads and holds finite weights, and says which newer ones it skipped and why.
"""
from __future__ import annotations

import os
import os.path as osp
import random
import re

import numpy as np
import torch

from .checkpoint import CheckpointReadError, load_checkpoint_file

CHECKPOINT_NAME = re.compile(r'^(iter|epoch)_(\d+)\.pth$')


def rng_state() -> dict:
    """The state of every random number generator a training step may draw from."""
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore a state of :func:`rng_state`."""
    random.setstate(state['python'])
    np.random.set_state(state['numpy'])
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])


class RestoreAfterReplay:
    """Wraps a train loop's data iterator: after ``replay`` batches, restore a random state, then pass through.

    ``IterBasedTrainLoop.run`` replays ``iter`` batches to reach the saved position
    of the sampler; the replay draws augmentation randomness, so the saved state
    is restored only when the first new batch is requested.
    """

    def __init__(self, iterator, replay: int, state: dict) -> None:
        self.iterator, self.replay, self.state = iterator, replay, state

    def __iter__(self):
        return self

    def __next__(self):
        if self.replay == 0 and self.state is not None:
            set_rng_state(self.state)
            self.state = None
        self.replay -= 1
        return next(self.iterator)


def checkpoint_problem(path: str) -> str | None:
    """Why the checkpoint at ``path`` cannot be resumed from, or ``None`` if it can."""
    try:
        checkpoint = load_checkpoint_file(path)
    except CheckpointReadError as error:
        return error.reason
    if not isinstance(checkpoint, dict) or 'state_dict' not in checkpoint or 'meta' not in checkpoint:
        return 'not a training checkpoint (no state_dict / meta)'
    from .nonfinite import nonfinite_tensors
    bad = nonfinite_tensors(checkpoint['state_dict'].items())
    if bad:
        return f'{len(bad)} of {len(checkpoint["state_dict"])} weights non-finite (first: {bad[:3]})'
    return None


def find_resumable_checkpoint(work_dir: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest intact ``iter_N.pth`` / ``epoch_N.pth`` of ``work_dir`` and the ones skipped, with why.

    Candidates are the checkpoints in ``work_dir`` only, newest (largest N, then latest
    modification) first. A ``last_checkpoint`` file naming a file elsewhere (a work dir
    copied from another run's, or a ``CheckpointHook(out_dir=...)``) is not followed: it
    is listed among the skipped, so that another run's checkpoint is resumed only by name
    (``--resume CKPT``).
    """
    skipped = []
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            target = f.read().strip()
        if osp.dirname(osp.realpath(target)) != osp.realpath(work_dir):
            skipped.append((target, f'named by {pointer} but outside the work dir {work_dir}, so possibly another '
                                    "run's: not followed (pass it as --resume CKPT to resume from it)"))
    candidates = [osp.join(work_dir, name) for name in (os.listdir(work_dir) if osp.isdir(work_dir) else ())
                  if CHECKPOINT_NAME.match(name)]
    candidates.sort(key=lambda p: (int(CHECKPOINT_NAME.match(osp.basename(p))[2]), osp.getmtime(p)), reverse=True)
    for path in candidates:
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        skipped.append((path, problem))
    return None, skipped


#: What a resumed run compares between its config and the one stored in the checkpoint: the
#: optimisation (applied to the restored state by ``override_optim``) and the model and data.
OPTIM_KEYS = ('optim_wrapper', 'param_scheduler', 'train_cfg')
RUN_KEYS = ('model', 'train_dataloader.dataset', 'train_dataloader.batch_size')
#: Settings that a resume may change freely: the checkpoint overwrites what they initialise.
IGNORED = ('init_cfg', 'pretrained')


def _get(cfg, dotted: str):
    for part in dotted.split('.'):
        if not isinstance(cfg, dict) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


class _Unset:
    """A key a config does not set: the class's default applies."""

    def __repr__(self) -> str:
        return 'default'


UNSET = _Unset()


def config_changes(old, new, path: str = '') -> list[str]:
    """Every ``path: old -> new`` where two config values differ (dicts and lists compared item by item; a key
    that one config does not set shows as ``default``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in sorted(set(old) | set(new), key=str) if key not in IGNORED
                for change in config_changes(old.get(key, UNSET), new.get(key, UNSET),
                                             f'{path}.{key}' if path else str(key))]
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        return [change for i, (a, b) in enumerate(zip(old, new)) for change in config_changes(a, b, f'{path}[{i}]')]
    return [] if old == new else [f'{path}: {old!r} -> {new!r}']


def _round_trip(saved_cfg: str, cfg) -> tuple[dict, dict]:
    """``saved_cfg`` (a checkpoint's ``meta['cfg']``) and ``cfg`` as dicts, through the same ``Config`` text
    round trip."""
    from mmengine.config import Config
    return (Config.fromstring(saved_cfg, file_format='.py').to_dict(),
            Config.fromstring(cfg.pretty_text, file_format='.py').to_dict())


def optimizer_types(saved_cfg: str, cfg) -> tuple[str | None, str | None]:
    """The ``optim_wrapper.optimizer.type`` of ``saved_cfg`` and of ``cfg`` (``None`` where not set)."""
    old, new = _round_trip(saved_cfg, cfg)
    return _get(old, 'optim_wrapper.optimizer.type'), _get(new, 'optim_wrapper.optimizer.type')


def resume_changes(saved_cfg: str, cfg) -> tuple[list[str], list[str]]:
    """The changes of the optimisation and of the model / data from ``saved_cfg`` (a checkpoint's
    ``meta['cfg']``) to ``cfg``."""
    old, new = _round_trip(saved_cfg, cfg)
    changes = [[c for key in keys for c in config_changes(_get(old, key), _get(new, key), key)]
               for keys in (OPTIM_KEYS, RUN_KEYS)]
    return changes[0], changes[1]
