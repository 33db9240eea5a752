"""Load MMEngine checkpoints with ``torch.load(weights_only=True)`` (torch >= 2.6).

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
"""
from __future__ import annotations

import pickle
import re

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
