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
``HistoryBuffer`` and refuses everything else.
"""
from __future__ import annotations

import pickle

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
