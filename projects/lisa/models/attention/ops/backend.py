"""The one backend choice of the operators, and the one loader of their compiled extensions.

Backends (:data:`BACKENDS`), one vocabulary for every operator of :mod:`..ops`:

* ``'reference'``: the definition, plain tensor code differentiated by autograd; runs anywhere
  (and is what ``torch.export`` / ``torch.onnx.export(..., dynamo=True)`` trace, since no
  exporter can represent the custom ops);
* ``'torch'``: the registered ``lisa::`` custom ops with analytic backward passes, computed in
  tensor operations (any device); an operator without such an op (the kernel features, the
  depthwise convolution: their definitions are already a few tensor operations) names its
  reference for it in its table;
* ``'cpu_kernel'``: custom ops computed by the compiled C++ kernels (``<operator>_cpu.cpp``
  beside each operator, built by ``pip install --no-build-isolation -e .``): CPU,
  float32/float64, no autocast.

Every operator has one table ``{backend: implementation}`` (``IMPLEMENTATIONS`` of its module,
all of :data:`BACKENDS` with one signature) and asks :func:`choose` once per call which entry runs
(NATTEN's ``choose_backend``); nothing below that entry asks again. ``'auto'`` (the default) is the
first of ``cpu_kernel, torch, reference`` that :func:`can_run`. An operator takes ``backend=``
(``None``: the global choice, :func:`use_backend`); a module passes its own
(``KernelAttention(backend=...)``, :func:`~..base.set_backend`) and never asks which one ran. A
backend named explicitly that cannot run raises, naming the reason.
"""
from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import TypeVar

import torch
from torch import Tensor

BACKENDS = ('reference', 'torch', 'cpu_kernel')
#: What ``'auto'`` tries, in order.
PREFERENCE = ('cpu_kernel', 'torch', 'reference')
CHOICES = ('auto', *BACKENDS)
#: The compiled extensions, ``projects.lisa.models.attention.ops._<name>_cpu`` from ``ops/<name>_cpu.cpp``
#: (setup.py), one per operator ``ops/<name>.py``.
EXTENSION_NAMES = ('neighbourhood', 'features', 'depthwise', 'walk')

Implementation = TypeVar('Implementation', bound=Callable)


def _load_extensions() -> dict[str, ModuleType]:
    """Every compiled extension by name, or none (setup.py builds all of them or none)."""
    try:
        return {name: importlib.import_module(f'._{name}_cpu', __package__) for name in EXTENSION_NAMES}
    except ImportError:
        warnings.warn("projects.lisa: the CPU kernels are not built; backend 'auto' runs tensor operations on "
                      'the CPU (slower); build them with `pip install --no-build-isolation -e .`', stacklevel=2)
        return {}


_EXTENSIONS = _load_extensions()
_choice = 'auto'  # the global choice, set by use_backend


def kernels_built() -> bool:
    """Whether the compiled CPU kernels are importable."""
    return bool(_EXTENSIONS)


def extension(name: str) -> ModuleType:
    """The compiled extension ``name`` (one of :data:`EXTENSION_NAMES`), for the ``'cpu_kernel'`` entry of an
    operator's table once :func:`choose` chose it."""
    return _EXTENSIONS[name]


def check_backend(name: str) -> str:
    """Return ``name`` if it is one of :data:`CHOICES`, else raise naming the valid ones."""
    if name not in CHOICES:
        raise ValueError(f'backend={name!r} is not one of {list(CHOICES)}')
    return name


def _obstacle(backend: str, tensors: tuple[Tensor, ...], dtype: torch.dtype | None) -> str | None:
    """Why ``backend`` (one of :data:`BACKENDS`) cannot run an operator on ``tensors`` now, or None if it can;
    ``dtype``: :func:`resolve`'s."""
    if backend == 'reference':
        return None
    if torch.compiler.is_exporting():
        return 'torch.export traces plain tensor operations only (no exporter represents the lisa:: custom ops)'
    if backend == 'torch':
        return None
    if not _EXTENSIONS:
        return 'the CPU kernels are not built (pip install --no-build-isolation -e .)'
    if dtype is None and torch.is_autocast_enabled('cpu'):
        return 'the CPU kernels do not run under CPU autocast'
    found = {(t.device, t.dtype if dtype is None else dtype) for t in tensors}
    if all(device.type == 'cpu' and d in (torch.float32, torch.float64) for device, d in found):
        return None
    found = sorted(f'{d} on {device}' for device, d in found)
    return f'the CPU kernels take CPU float32/float64 tensors, got {", ".join(found)}'


def can_run(backend: str, *tensors: Tensor, dtype: torch.dtype | None = None) -> bool:
    """Whether ``backend`` (one of :data:`BACKENDS`) can run an operator on ``tensors`` now: the reference
    always; the custom ops not under ``torch.export``; the CPU kernels where built, on CPU float32/float64
    tensors and not under CPU autocast (``dtype``: :func:`resolve`'s)."""
    return _obstacle(backend, tensors, dtype) is None


def resolve(backend: str | None, *tensors: Tensor, dtype: torch.dtype | None = None) -> str:
    """The backend that runs an operator on ``tensors``: ``backend``, the global choice where it is None,
    ``'auto'`` as the first of :data:`PREFERENCE` that can run; an explicit one that cannot run raises.

    ``dtype``: the dtype that an operator casting its inputs itself, outside autocast, computes in
    (the walk, the neighbourhood attention); None: the tensors' own, under the current autocast."""
    backend = _choice if backend is None else check_backend(backend)
    if backend == 'auto':
        for candidate in PREFERENCE:
            if can_run(candidate, *tensors, dtype=dtype):
                return candidate
    obstacle = _obstacle(backend, tensors, dtype)
    if obstacle:
        raise ValueError(f'backend={backend!r} cannot run here: {obstacle}')
    return backend


def choose(implementations: Mapping[str, Implementation], backend: str | None, *tensors: Tensor,
           dtype: torch.dtype | None = None) -> Implementation:
    """An operator's implementation for ``tensors``: the entry of its table ``{backend: implementation}``
    (every one of :data:`BACKENDS`) for :func:`resolve`'s backend. The one place where an operator's call
    asks which backend runs it."""
    return implementations[resolve(backend, *tensors, dtype=dtype)]


def current_backend() -> str:
    """The global choice (one of :data:`CHOICES`), ``'auto'`` outside :func:`use_backend`."""
    return _choice


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Run every operator whose module or call names no backend with ``name`` (one of :data:`CHOICES`)."""
    global _choice
    previous, _choice = _choice, check_backend(name)
    try:
        yield
    finally:
        _choice = previous
