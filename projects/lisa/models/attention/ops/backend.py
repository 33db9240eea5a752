"""The one backend choice of the operators, and the one loader of their compiled extensions.

Backends (:data:`BACKENDS`), one vocabulary for every operator of :mod:`..ops`:

* ``'reference'``: the definition, plain tensor code differentiated by autograd; runs anywhere
  (and is what ``torch.export`` / ``torch.onnx.export(..., dynamo=True)`` trace, since no
  exporter can represent the custom ops);
* ``'torch'``: the registered ``lisa::`` custom ops with analytic backward passes, computed in
  tensor operations (any device); an operator without such an op runs its reference;
* ``'cpu_kernel'``: the same custom ops computed by the compiled C++ kernels (``<operator>_cpu.cpp``
  beside each operator, built by ``pip install --no-build-isolation -e .``): CPU, float32/float64,
  no autocast.

``'auto'`` (the default) is the first of ``cpu_kernel, torch, reference`` that :func:`can_run`.
An operator takes ``backend=`` (``None``: the global choice, :func:`use_backend`); a module
passes its own (``KernelAttention(backend=...)``, :func:`~..lisa.set_backend`). A backend
named explicitly that cannot run raises, naming the reason.
"""
from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from types import ModuleType

import torch
from torch import Tensor

BACKENDS = ('reference', 'torch', 'cpu_kernel')
#: What ``'auto'`` tries, in order.
PREFERENCE = ('cpu_kernel', 'torch', 'reference')
CHOICES = ('auto', *BACKENDS)
#: The compiled extensions, ``projects.lisa.models.attention.ops._<name>_cpu`` from ``ops/<name>_cpu.cpp``
#: (setup.py), one per operator ``ops/<name>.py``.
EXTENSION_NAMES = ('neighbourhood', 'features', 'depthwise', 'walk')


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
    """The compiled extension ``name`` (one of :data:`EXTENSION_NAMES`), for an operator's ``'cpu_kernel'``
    backend once :func:`can_run` said yes."""
    return _EXTENSIONS[name]


def check_backend(name: str) -> str:
    """Return ``name`` if it is one of :data:`CHOICES`, else raise naming the valid ones."""
    if name not in CHOICES:
        raise ValueError(f'backend={name!r} is not one of {list(CHOICES)}')
    return name


def _obstacle(backend: str, tensors: tuple[Tensor, ...]) -> str | None:
    """Why ``backend`` (one of :data:`BACKENDS`) cannot run an operator on ``tensors`` now, or None if it can."""
    if backend == 'reference':
        return None
    if torch.compiler.is_exporting():
        return 'torch.export traces plain tensor operations only (no exporter represents the lisa:: custom ops)'
    if backend == 'torch':
        return None
    if not _EXTENSIONS:
        return 'the CPU kernels are not built (pip install --no-build-isolation -e .)'
    if torch.is_autocast_enabled('cpu'):
        return 'the CPU kernels do not run under CPU autocast'
    if all(t.device.type == 'cpu' and t.dtype in (torch.float32, torch.float64) for t in tensors):
        return None
    found = sorted({f'{t.dtype} on {t.device}' for t in tensors})
    return f'the CPU kernels take CPU float32/float64 tensors, got {", ".join(found)}'


def can_run(backend: str, *tensors: Tensor) -> bool:
    """Whether ``backend`` (one of :data:`BACKENDS`) can run an operator on ``tensors`` now: the reference
    always; the custom ops not under ``torch.export``; the CPU kernels where built, on CPU float32/float64
    tensors and not under CPU autocast."""
    return _obstacle(backend, tensors) is None


def resolve(backend: str | None, *tensors: Tensor) -> str:
    """The backend that runs an operator on ``tensors``: ``backend``, the global choice where it is None,
    ``'auto'`` as the first of :data:`PREFERENCE` that can run; an explicit one that cannot run raises."""
    backend = _choice if backend is None else check_backend(backend)
    if backend == 'auto':
        for candidate in PREFERENCE:
            if can_run(candidate, *tensors):
                return candidate
    obstacle = _obstacle(backend, tensors)
    if obstacle:
        raise ValueError(f'backend={backend!r} cannot run here: {obstacle}')
    return backend


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
