"""The one registration point of LiSA into every installed OpenMMLab library: a config names it.

    custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)

Importing this module (once per process; again is a no-op) registers each class of
:func:`_modules` into the ``MODELS`` registry of mmseg, mmdet and mmpretrain, whichever are
installed, so the same ``type='LiSAPVT'`` resolves in all of their configs; the run-safety hooks
and the CPU mixed-precision wrapper into MMEngine's root ``HOOKS`` / ``OPTIM_WRAPPERS``;
``AlignResize`` into mmseg's ``TRANSFORMS``, ``LowMemoryEncoderDecoder`` into its ``MODELS`` and the
long-range probe's ``LongRangeAccuracy`` into its ``METRICS``;
and it allow-lists MMEngine's own types for ``torch.load(weights_only=True)``. No other module of the
package does any of this on import.
Code that builds models itself (``tools/train.py``, the tests) calls :func:`register_all_modules`.

``custom_imports=dict(imports=['projects.lisa'])`` imports the package alone, which registers
nothing: under ``mim train`` such a config stops with mm's "LiSAPVT is not in the mmseg::model
registry"; the repo's tools still run it (they register explicitly) and say what to change
(:func:`legacy_imports`).
"""
from __future__ import annotations

import importlib
import importlib.util

SCOPES = ('mmseg', 'mmdet', 'mmpretrain')
#: What a config's ``custom_imports`` names to register LiSA, and the package name, which registers nothing.
CUSTOM_IMPORT, LEGACY_IMPORT = __name__, __package__


def _modules() -> list[type]:
    from .models import backbones
    return [getattr(backbones, name) for name in backbones.__all__]


def register_all_modules() -> list[str]:
    """Register :func:`_modules` into each installed scope (again: a no-op); return the scopes."""
    if importlib.util.find_spec('mmengine') is None:
        return []  # nothing to register into
    # Checkpoint loading is made safe here on purpose: MMEngine loads weights inside the Runner
    # (init_cfg Pretrained, load_from, --resume), and the config's custom_imports (this module) is
    # the only code of ours that runs first under `mim train` / `mim test`. It allow-lists MMEngine's
    # own types for torch.load(weights_only=True); it does not turn the check off.
    from .engine.checkpoint import allow_mmengine_checkpoints
    allow_mmengine_checkpoints()
    # The run-safety hooks and the CPU mixed-precision wrapper of configs/_base_/safe_runtime.py and
    # tools/train.py register themselves into MMEngine's root HOOKS / OPTIM_WRAPPERS (seen from every scope).
    from .engine import amp, checkpoint_hook, nonfinite, runtime_hook  # noqa: F401
    scopes = [s for s in SCOPES if importlib.util.find_spec(s) is not None]
    modules = _modules()
    for scope in scopes:
        registry = importlib.import_module(f'{scope}.registry').MODELS
        for module in modules:
            if registry.get(module.__name__) is not module:
                registry.register_module(module=module)
    if 'mmseg' in scopes:  # AlignResize (PVT's Semantic FPN evaluation), the configs' segmentor, the probe's metric
        importlib.import_module(f'{__package__}.datasets.transforms')
        importlib.import_module(f'{__package__}.models.segmentors')
        importlib.import_module(f'{__package__}.long_range.metric')
    return scopes


def config_scope(cfg, loader: str = 'train_dataloader') -> str:
    """The library a config belongs to, one of :data:`SCOPES`: its ``default_scope``, else the library whose
    registry defines the dataset type of ``loader``."""
    scope = cfg.get('default_scope')
    if scope in SCOPES:
        return scope
    dataset_type = ((cfg.get(loader) or {}).get('dataset') or {}).get('type')
    for candidate in SCOPES:
        registry = importlib.import_module(f'{candidate}.registry').DATASETS
        registry.import_from_location()  # the library's datasets register on import
        if dataset_type in registry.module_dict:
            return candidate
    raise ValueError(f'cannot tell the library of this config: default_scope={scope!r} and dataset type '
                     f'{dataset_type!r} belong to none of {", ".join(SCOPES)}')


def legacy_imports(cfg) -> str | None:
    """What to change if the config ``cfg`` (an MMEngine ``Config``) names the package in its
    ``custom_imports`` but not :data:`CUSTOM_IMPORT`; else None."""
    imports = list((cfg.get('custom_imports') or {}).get('imports') or [])
    if LEGACY_IMPORT not in imports or CUSTOM_IMPORT in imports:
        return None
    return (f"the config's custom_imports names {LEGACY_IMPORT!r}, which registers nothing: "
            f"name {CUSTOM_IMPORT!r} instead (mim train / mim test stop on it with 'LiSA... is not in the "
            "registry'; this tool registers LiSA itself)")


register_all_modules()  # what a config's custom_imports imports this module for
