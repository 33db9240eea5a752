"""The hooks of ``configs/_base_/safe_runtime.py`` for runs whose config does not inherit that fragment.

``tools/train.py`` and ``tools/test.py`` add them, so crash-safe checkpoints,
exact resume and the non-finite guard hold for any config they run.
"""
from __future__ import annotations

import os.path as osp

from mmengine.config import Config

FRAGMENT = osp.join(osp.dirname(osp.abspath(__file__)), '..', '..', '..', 'configs', '_base_', 'safe_runtime.py')


def add_safe_runtime(cfg: Config, fragment: str = FRAGMENT) -> None:
    """Append the ``custom_hooks`` of ``fragment`` whose type ``cfg.custom_hooks`` lacks."""
    hooks = list(cfg.get('custom_hooks') or [])
    present = {h.get('type') for h in hooks}
    cfg.custom_hooks = hooks + [h for h in Config.fromfile(fragment).custom_hooks if h['type'] not in present]
