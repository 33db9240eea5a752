"""Checkpoint files: loaded with ``torch.load(weights_only=True)`` (torch >= 2.6), written atomically, sized.

MMEngine 0.10.7 calls ``torch.load`` without ``weights_only``, so on current
torch every checkpoint load (``load_from``, ``init_cfg`` Pretrained,
``--resume``) runs the restricted unpickler, which rejects the few non-tensor
objects MMEngine itself stores: numpy arrays and scalars (meta, log history)
and :class:`~mmengine.logging.HistoryBuffer` with its statistics methods,
which pickle protocol 2 writes as ``getattr(HistoryBuffer, 'min')``.

Rather than turning the check off (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``), we
allow exactly those globals. ``getattr`` is replaced, for unpickling only, by
:func:`history_buffer_method`, which resolves public methods of
``HistoryBuffer`` and refuses everything else. :func:`load_checkpoint_file` says
what a file that still does not load is (cut short, or not a checkpoint), and
never advises loading it unsafely.

A file is written under a temporary name of this process (:data:`TMP_SUFFIX`), flushed, and renamed
into place (:func:`publish`), so a reader only ever sees a complete file; :func:`optimizer_bytes`
and :func:`state_bytes` size a checkpoint before it is written.
"""
from __future__ import annotations

import glob
import os
import os.path as osp
import pickle
import re
import secrets
from collections.abc import Mapping

import numpy as np
import torch

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct, scalar
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import _reconstruct, scalar


def history_buffer_method(owner: type, name: str):
    """``getattr`` restricted to the public methods of ``HistoryBuffer``."""
    from mmengine.logging import HistoryBuffer
    if owner is HistoryBuffer and not name.startswith('_') and callable(getattr(owner, name, None)):
        return getattr(owner, name)
    raise pickle.UnpicklingError(
        f'refusing getattr({owner!r}, {name!r}) while loading a checkpoint: only public '
        'methods of mmengine.logging.HistoryBuffer are allowed')


def allow_mmengine_checkpoints() -> None:
    """Allow-list what MMEngine checkpoints contain for weights-only loading."""
    from mmengine.logging import HistoryBuffer
    dtype_classes = [type(np.dtype(t)) for t in np.typecodes['All'] if t not in 'OV']
    torch.serialization.add_safe_globals([
        HistoryBuffer, (history_buffer_method, 'builtins.getattr'),
        np.ndarray, np.dtype, _reconstruct, scalar, *dtype_classes,
    ])


class CheckpointReadError(ValueError):
    """A file that does not load as a checkpoint; ``reason`` says why, in a few words."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f'{path}: {reason}')
        self.path, self.reason = path, reason


def _refusal(error: pickle.UnpicklingError) -> str:
    """What torch's weights-only unpickler stopped at, without its advice to load the file unsafely."""
    text = str(error)
    found = re.search(r'GLOBAL (\S+) was not an allowed global', text) or re.search(r'whose module (\S+) is blocked',
                                                                                   text)
    if found:
        return f'it holds Python code ({found[1]}), not only tensors and values'
    lines = [line.strip() for line in text.split('WeightsUnpickler error:')[-1].splitlines()]
    detail = next((line for line in lines if line and not line.startswith(('Weights only load failed', 'Please file',
                                                                           'Check the documentation'))), '')
    return f'the weights-only loader stops at: {detail[:160]}' if detail else 'the weights-only loader refuses it'


def load_checkpoint_file(path: str, mmap: bool = True):
    """``torch.load(path, weights_only=True)`` on the CPU (memory-mapped where the file's format allows), or
    :class:`CheckpointReadError` saying what the file is instead: unreadable (cut short, damaged) or not a
    checkpoint this project can load safely."""
    try:
        try:
            return torch.load(path, map_location='cpu', weights_only=True, mmap=mmap)
        except RuntimeError as error:
            if not (mmap and 'mmap can only be used' in str(error)):
                raise
            return torch.load(path, map_location='cpu', weights_only=True)  # the legacy, non-zip format
    except pickle.UnpicklingError as error:
        if 'Weights only load failed' not in str(error):
            raise CheckpointReadError(path, f'unreadable (UnpicklingError: {str(error).splitlines()[0][:160]})') \
                from None
        raise CheckpointReadError(path, f'not a checkpoint this project can load safely: {_refusal(error)}. A '
                                        'checkpoint of an MMEngine run or a state dict saved with torch.save loads; '
                                        'pass one of those') from None
    except Exception as error:  # a truncated zip, a partial pickle, a missing or unreadable file
        raise CheckpointReadError(path, f'unreadable ({type(error).__name__}: {str(error).splitlines()[0][:160]})') \
            from None


#: The suffix of this process's partial files: two processes never write the same temporary file.
TMP_SUFFIX = f'.{os.getpid()}-{secrets.token_hex(2)}.tmp'


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's) data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: str, path: str) -> None:
    """Make the complete, flushed file ``tmp`` appear as ``path`` in one step (POSIX ``rename``)."""
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(osp.dirname(osp.abspath(path)))


def write_text_atomically(path: str, text: str) -> None:
    with open(path + TMP_SUFFIX, 'w') as f:
        f.write(text)
    publish(path + TMP_SUFFIX, path)


def remove_partial_saves(folder: str, log=print) -> None:
    """Delete the ``*.tmp`` files an interrupted save left in ``folder`` (a kill, a full disk)."""
    for stale in glob.glob(osp.join(folder, '*.tmp')):
        log(f'removing {stale}, the partial file of an interrupted save')
        os.remove(stale)


class NoSpaceForCheckpointError(OSError):
    """The disk cannot hold the next checkpoint beside the kept ones."""


def state_bytes(state) -> int:
    """The bytes of the tensors in a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return state.nbytes
    if isinstance(state, Mapping):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def first_step_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the state that the first ``step`` of ``optimizer`` creates (AdamW: two moments of each
    trained parameter and its step count), from one step of the same optimizer on meta-device copies of the
    parameters (no memory, no change to the model); twice the trained parameters' bytes (the Adam family's
    moments) for an optimizer that cannot step there."""
    trained = [[p for p in group['params'] if p.requires_grad] for group in optimizer.param_groups]
    twins = [[torch.empty_like(p, device='meta') for p in params] for params in trained]
    for twin in (t for group in twins for t in group):
        twin.grad = torch.empty_like(twin)
    groups = [{**{k: v for k, v in group.items() if k != 'params'}, 'params': params}
              for group, params in zip(optimizer.param_groups, twins)]
    try:
        twin = type(optimizer)(groups)
        with torch.no_grad():
            twin.step()
        return state_bytes(twin.state_dict()['state'])
    except Exception:  # an optimizer that needs other arguments, or real values
        return 2 * sum(p.nbytes for params in trained for p in params)


def optimizer_bytes(optim_wrapper) -> int:
    """The bytes of an optim wrapper's state in a checkpoint; an optimizer that has not stepped yet counted
    with the state its first step creates (:func:`first_step_state_bytes`)."""
    wrappers = getattr(optim_wrapper, 'optim_wrappers', {'': optim_wrapper})  # an OptimWrapperDict, or one
    return state_bytes(optim_wrapper.state_dict()) + sum(
        first_step_state_bytes(w.optimizer) for w in wrappers.values() if not w.optimizer.state)


#: Free space asked for beyond the size of the previous checkpoint: it grows a little as the
#: message hub's history grows.
SPACE_MARGIN = 0.05
SPACE_MARGIN_BYTES = 1 << 20
