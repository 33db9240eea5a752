"""One registration point for every LiSA module in every installed OpenMMLab library.

``import projects.lisa`` (or ``custom_imports=dict(imports=['projects.lisa'])``
in a config) registers each class of :data:`MODULES` into the ``MODELS``
registry of mmseg, mmdet and mmpretrain, whichever are installed, so the
same ``type='LiSAPVT'`` resolves in all of their configs.
"""
from __future__ import annotations

import importlib
import importlib.util

SCOPES = ('mmseg', 'mmdet', 'mmpretrain')


def _modules() -> list[type]:
    from .models import backbones
    return [getattr(backbones, name) for name in backbones.__all__]


def register_all_modules() -> list[str]:
    """Register :func:`_modules` into each installed scope; return the scopes."""
    if importlib.util.find_spec('mmengine') is None:
        return []  # torch-only use of projects.lisa.models.attention
    # Checkpoint loading is made safe here, at import, on purpose: MMEngine loads
    # weights inside the Runner (init_cfg Pretrained, load_from, --resume), and the
    # config's custom_imports (this import) is the only code of ours that runs first
    # under `mim train` / `mim test`. It allow-lists MMEngine's own types for
    # torch.load(weights_only=True); it does not turn the check off.
    from .engine.checkpoint import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()
    # The run-safety hooks and the CPU mixed-precision wrapper of configs/_base_/safe_runtime.py and
    # tools/train.py register themselves into MMEngine's root HOOKS / OPTIM_WRAPPERS (seen from every scope).
    from .engine import amp, checkpoint_hook, nonfinite  # noqa: F401
    scopes = [s for s in SCOPES if importlib.util.find_spec(s) is not None]
    modules = _modules()
    for scope in scopes:
        registry = importlib.import_module(f'{scope}.registry').MODELS
        for module in modules:
            if registry.get(module.__name__) is not module:
                registry.register_module(module=module)
    if 'mmseg' in scopes:  # AlignResize into mmseg's TRANSFORMS (PVT's Semantic FPN evaluation)
        importlib.import_module(f'{__package__}.datasets.transforms')
    return scopes
