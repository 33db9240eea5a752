"""The run-safety fragment (the package's ``configs/safe_runtime.py``) for configs that do not inherit it,
and the options of the tools that load a checkpoint.

``tools/train.py`` and ``tools/test.py`` add the fragment's hooks (:func:`add_safe_runtime`), so crash-safe
checkpoints, exact resume and the non-finite guard hold for any config they run. The fragment is package data
(the repo's ``configs/_base_/safe_runtime.py`` inherits it), so an installed lisa-mm needs no checkout.
Importing this module registers nothing.
"""
from __future__ import annotations

import argparse
import os.path as osp

from mmengine.config import Config

FRAGMENT = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'configs', 'safe_runtime.py')


def add_safe_runtime(cfg: Config, fragment: str = FRAGMENT, **safe_runtime) -> None:
    """Append the ``custom_hooks`` of ``fragment`` whose type ``cfg.custom_hooks`` lacks; ``safe_runtime``:
    arguments of the ``SafeRuntimeHook`` (``allow_new``, ``allow_unused``, ``override_optim``, ...)
    set on it, those that are ``None`` or false left as the config has them."""
    hooks = list(cfg.get('custom_hooks') or [])
    present = {h.get('type') for h in hooks}
    cfg.custom_hooks = hooks + [h for h in Config.fromfile(fragment).custom_hooks if h['type'] not in present]
    for hook in cfg.custom_hooks:
        if hook.get('type') == 'SafeRuntimeHook':
            hook.update({k: v for k, v in safe_runtime.items() if v})


def add_allow_args(parser: argparse.ArgumentParser) -> None:
    """``--allow-new`` / ``--allow-unused`` / ``--allow-mismatch``: the globs of the checkpoint's strict report
    (:func:`~projects.lisa.models.backbones.loading.check_state_dict`), the same in every tool that loads one."""
    parser.add_argument('--allow-new', nargs='+', metavar='GLOB',
                        help="tensors of the model that the checkpoint may lack (fnmatch globs, or a preset such as "
                             "'lisa_from_softmax'); left as initialised")
    parser.add_argument('--allow-unused', nargs='+', metavar='GLOB',
                        help='tensors of the checkpoint that the model may not use (fnmatch globs)')
    parser.add_argument('--allow-mismatch', nargs='+', metavar='GLOB',
                        help="tensors of the model whose shape in the checkpoint differs, e.g. a head trained for "
                             "other classes (fnmatch globs, or a preset: 'seg_head', 'det_head', 'cls_head'); left "
                             "as initialised (not on --resume)")
