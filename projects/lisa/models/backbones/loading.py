"""Loading checkpoints into the LiSA backbones: key conversion, position-table resizing, a report.

:func:`adapt_state_dict` (every ``load_state_dict``, through the backbones' pre-hook) renames
foreign layouts with the backbone's ``convert_checkpoint`` and resizes position tables of
another grid bicubically. :func:`load_pretrained` (``init_cfg`` Pretrained) also reads the
file and refuses a checkpoint that leaves a tensor of the model unloaded, except the ones
its ``allow_new`` globs declare new by design.
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.runner import CheckpointLoader
from torch import Tensor, nn


class IncompleteCheckpointError(RuntimeError):
    """A checkpoint leaves tensors of the model unloaded (or of the wrong shape)."""


@dataclass
class LoadReport:
    """What :func:`load_pretrained` did, tensor by tensor."""
    model: str
    source: str
    converted: bool
    resized: list[tuple[str, tuple, tuple]] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)          # not in the checkpoint, allowed by allow_new
    missing: list[str] = field(default_factory=list)      # not in the checkpoint, not allowed
    unexpected: list[str] = field(default_factory=list)   # in the checkpoint, not in the model
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # key, checkpoint, model shape

    def __str__(self) -> str:
        total = len(self.loaded) + len(self.new) + len(self.missing) + len(self.mismatched)
        how = ' (key names converted)' if self.converted else ''
        lines = [f'{self.model}: loaded {len(self.loaded)} of {total} tensors from {self.source}{how}']
        for title, items in (
                ('resized position tables', [f'{k} {a} -> {b}' for k, a, b in self.resized]),
                ('new by design (allow_new), initialised', self.new),
                ('NOT IN THE CHECKPOINT', self.missing),
                ('SHAPE MISMATCH', [f'{k} checkpoint {a} vs model {b}' for k, a, b in self.mismatched]),
                ('unused, not in this model', self.unexpected)):
            if items:
                lines.append(f'  {title} ({len(items)}): ' + ', '.join(items))
        return '\n'.join(lines)


def _square_side(length: int) -> int | None:
    side = math.isqrt(max(length, 0))
    return side if side * side == length else None


def resize_position_table(model: nn.Module, key: str, value: Tensor, shape: torch.Size) -> Tensor | None:
    """``value`` resized bicubically to ``shape`` if ``key`` is a position table, else None.

    Position tables: ``relative_position_bias_table`` ``((2w-1)^2, heads)`` (Swin's windows),
    and ``(1, p + h*w, C)`` tensors of a module with a ``pos_shape`` attribute (and
    ``num_prefix_tokens = p``, default 0: PVT's and ViT's position embeddings, the kernel
    attentions' positional encoding), whose ``p`` prefix rows are kept. The checkpoint's
    grid must be square (it is for ImageNet checkpoints).
    """
    if key.endswith('relative_position_bias_table'):
        s1, s2 = _square_side(value.shape[0]), _square_side(shape[0])
        if value.dim() != 2 or value.shape[1] != shape[1] or None in (s1, s2):
            return None
        table = F.interpolate(value.T.reshape(1, -1, s1, s1).float(), size=(s2, s2), mode='bicubic',
                              align_corners=False)  # bicubic needs float32 on some devices
        return table.reshape(-1, s2 * s2).T.to(value.dtype)
    owner = model.get_submodule(key.rpartition('.')[0])
    pos_shape, p = getattr(owner, 'pos_shape', None), getattr(owner, 'num_prefix_tokens', 0)
    if pos_shape is None or value.dim() != 3 or value.shape[0] != 1 or value.shape[2] != shape[2]:
        return None
    side = _square_side(value.shape[1] - p)
    if side is None:
        return None
    grid = F.interpolate(value[:, p:].reshape(1, side, side, -1).permute(0, 3, 1, 2).float(), size=pos_shape,
                         mode='bicubic', align_corners=False).flatten(2).transpose(1, 2)
    return torch.cat([value[:, :p], grid.to(value.dtype)], dim=1)


def adapt_state_dict(model: nn.Module, state_dict: dict[str, Tensor]) -> tuple[dict, list]:
    """``state_dict`` in ``model``'s key layout (``model.convert_checkpoint``), position tables
    of another size resized; returns it and the list of ``(key, old shape, new shape)`` resized."""
    converted = model.convert_checkpoint(state_dict)
    own = model.state_dict()
    resized = []
    for key, value in converted.items():
        if key in own and value.shape != own[key].shape:
            table = resize_position_table(model, key, value, own[key].shape)
            if table is not None:
                converted[key] = table
                resized.append((key, tuple(value.shape), tuple(table.shape)))
    return converted, resized


def _globs(keys: Sequence[str]) -> list[str]:
    """Globs covering ``keys``, indices replaced by ``*`` (for the error's hint)."""
    return sorted({re.sub(r'(?<=\.)\d+(?=\.)|^\d+(?=\.)', '*', k) for k in keys})


def load_pretrained(model: nn.Module, checkpoint: str, prefix: str | None = None,
                    allow_new: Sequence[str] = ()) -> LoadReport:
    """Load every tensor of ``model`` from ``checkpoint``, log a report, or raise.

    The state dict is ``ckpt['state_dict']`` (mmengine), ``ckpt['model']`` (the official
    releases) or ``ckpt`` itself; with ``prefix`` (e.g. ``'backbone.'`` of a classifier or a
    detector) only its keys are kept, prefix stripped. Keys are converted and position tables
    resized by :func:`adapt_state_dict`. Raises :class:`IncompleteCheckpointError` if a tensor
    of the model has no counterpart of its shape, unless it matches a glob of ``allow_new``
    (``fnmatch``, e.g. ``'*.attn.step_mlp.*'``: new by design, left as initialised).
    """
    ckpt = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu', logger='current')
    state_dict = ckpt.get('state_dict', ckpt.get('model', ckpt))
    heads = sorted({k.split('.')[0] + '.' for k in state_dict if '.' in k})
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        state_dict = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if not state_dict:
            raise KeyError(f'no key of checkpoint {checkpoint!r} starts with prefix {prefix!r}; '
                           f'its keys start with {heads}')
    converted, resized = adapt_state_dict(model, state_dict)
    report = LoadReport(type(model).__name__, checkpoint, converted.keys() != state_dict.keys(), resized)
    own = model.state_dict()
    for key, value in converted.items():
        if key not in own:
            report.unexpected.append(key)
        elif value.shape != own[key].shape:
            report.mismatched.append((key, tuple(value.shape), tuple(own[key].shape)))
        else:
            report.loaded.append(key)
    for key in own:
        if key not in converted:
            (report.new if any(fnmatch(key, g) for g in allow_new) else report.missing).append(key)
    if report.missing or report.mismatched:
        hint = []
        if not report.loaded:
            hint.append(f'Nothing matches: is prefix={prefix!r} right? The checkpoint\'s keys start with {heads}.')
        if report.missing:
            hint.append('If the tensors not in the checkpoint are new by design (e.g. LiSA\'s own weights when '
                        'starting from a softmax checkpoint), allow them in init_cfg: '
                        f'allow_new={_globs(report.missing)}.')
        raise IncompleteCheckpointError('\n'.join([str(report), *hint]))
    model.load_state_dict({k: converted[k] for k in report.loaded}, strict=False)
    print_log(str(report), logger='current', level=logging.INFO)
    return report
