"""The operators' backends for the tests: each test runs every one of ``ops.BACKENDS``, skipping one
that cannot run on its tensors (``cpu_kernel`` on CUDA under ``tools/gpu_check.py``, or not built)."""
from __future__ import annotations

import pytest
from torch import Tensor

from projects.lisa.models.attention import ops

BACKENDS = ops.BACKENDS
#: The custom-op backends (held to the reference).
FAST = tuple(b for b in BACKENDS if b != 'reference')


def require(backend: str, *tensors: Tensor) -> str:
    """``backend``, or skip the test where it cannot run on ``tensors``."""
    if not ops.can_run(backend, *tensors):
        pytest.skip(f'backend {backend!r} cannot run on {tensors[0].dtype} {tensors[0].device} here')
    return backend
