"""Loading checkpoints into the LiSA backbones: key conversion, position-table resizing, a report.

:func:`adapt_state_dict` (every ``load_state_dict``, through the backbones' pre-hook) renames
foreign layouts with the backbone's ``convert_checkpoint`` and resizes position tables of
another grid bicubically. :func:`load_pretrained` (``init_cfg`` Pretrained) also reads the
file and refuses a checkpoint that leaves a tensor of the model unloaded, except the ones
its ``allow_new`` globs declare new by design, or loads a tensor of another shape, except the
ones its ``allow_mismatch`` globs name (a head trained for other classes: they keep the model's
initialisation). :func:`check_state_dict` applies the same report to a whole model (``load_from``,
``--resume``, ``tools/test.py``, ``tools/export_onnx.py``: :func:`load_checkpoint_strictly`), where
a tensor the model does not use also stops the load unless an ``allow_unused`` glob names it.
"""
from __future__ import annotations

import logging
import math
import os.path as osp
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch

import torch
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.runner import CheckpointLoader
from torch import Tensor, nn


class IncompleteCheckpointError(RuntimeError):
    """A checkpoint leaves tensors of the model unloaded (or of the wrong shape); ``report`` says which."""

    def __init__(self, message: str, report: LoadReport) -> None:
        super().__init__(message)
        self.report = report


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
    allowed_mismatch: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # the same, allowed: initialised
    ignored: list[str] = field(default_factory=list)      # in the checkpoint, not in the model, allowed by allow_unused

    def __str__(self) -> str:
        total = len(self.loaded) + len(self.new) + len(self.missing) + len(self.mismatched) + len(
            self.allowed_mismatch)
        how = ' (key names converted)' if self.converted else ''
        lines = [f'{self.model}: loaded {len(self.loaded)} of {total} tensors from {self.source}{how}']
        for title, items in (
                ('resized position tables', [f'{k} {a} -> {b}' for k, a, b in self.resized]),
                ('new by design (allow_new), initialised', self.new),
                ('NOT IN THE CHECKPOINT', self.missing),
                ('SHAPE MISMATCH', [f'{k} checkpoint {a} vs model {b}' for k, a, b in self.mismatched]),
                ('shape mismatch allowed (allow_mismatch), initialised',
                 [f'{k} checkpoint {a} vs model {b}' for k, a, b in self.allowed_mismatch]),
                ('unused, not in this model', self.unexpected),
                ('unused by design (allow_unused)', self.ignored)):
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


def is_url(path: str) -> bool:
    """Whether a checkpoint path is a URL (``https://``, ``open-mmlab://``, ...), for the libraries to fetch."""
    return re.match(r'^[\w-]+://', path) is not None


def _globs(keys: Sequence[str]) -> list[str]:
    """Globs covering ``keys``, indices replaced by ``*`` (for the error's hint)."""
    return sorted({re.sub(r'(?<=\.)\d+(?=\.)|^\d+(?=\.)', '*', k) for k in keys})


#: Named sets of ``allow_new`` globs. ``'lisa_from_softmax'``: the tensors a LiSA attention has and a
#: softmax attention lacks (the kernel attention's focusing ``scale``, ``positional_encoding`` and
#: ``dwc``; LiSA's branch mix ``alpha`` and adaptive ``step_mlp``). ``'dense_norms'``: the norms a dense
#: Swin adds after stages 1-3, which an ImageNet classifier (official, mmpretrain's or this project's)
#: does not have; they start as initialised, as when mmseg / mmdet load such a checkpoint.
ALLOW_NEW_PRESETS: dict[str, tuple[str, ...]] = {
    'lisa_from_softmax': ('*.attn.scale', '*.attn.positional_encoding.*', '*.attn.dwc.*', '*.attn.alpha',
                          '*.attn.step_mlp.*'),
    'dense_norms': ('norm0.*', 'norm1.*', 'norm2.*'),
}
#: Named sets of ``allow_mismatch`` globs: the layers of each task's head whose shape follows
#: ``num_classes`` (mmseg's decode and auxiliary heads; mmdet's Mask R-CNN box and mask heads and
#: RetinaNet; mmpretrain's linear, ViT and DeiT heads), for fine-tuning on other classes.
ALLOW_MISMATCH_PRESETS: dict[str, tuple[str, ...]] = {
    'seg_head': ('decode_head.conv_seg.*', 'auxiliary_head.conv_seg.*'),
    'det_head': ('roi_head.bbox_head.fc_cls.*', 'roi_head.bbox_head.fc_reg.*', 'roi_head.mask_head.conv_logits.*',
                 'bbox_head.retina_cls.*'),
    'cls_head': ('head.fc.*', 'head.layers.head.*', 'head.layers.head_dist.*'),
}
#: What each preset of :data:`ALLOW_NEW_PRESETS` names, for the messages.
PRESET_NAMES: dict[str, str] = {'lisa_from_softmax': "the kernel attention's own (LiSA's, FLatten's), which a softmax "
                                                     "checkpoint lacks",
                                'dense_norms': 'the output norms of stages 1-3 that a classifier lacks'}
PRESETS: dict[str, dict[str, tuple[str, ...]]] = dict(
    allow_new=ALLOW_NEW_PRESETS, allow_mismatch=ALLOW_MISMATCH_PRESETS, allow_unused={})


def expand_globs(globs: str | Sequence[str], name: str) -> list[str]:
    """``globs`` as a list, names of the presets of argument ``name`` (:data:`PRESETS`) replaced by their globs."""
    globs, presets = [globs] if isinstance(globs, str) else list(globs), PRESETS[name]
    for g in globs:
        if not isinstance(g, str):
            raise ValueError(f'{name}={globs!r}: every entry must be a glob string'
                             + (f' or one of {sorted(presets)}' if presets else '') + f', got {g!r}')
    return [p for g in globs for p in presets.get(g, (g, ))]


def _compare(report: LoadReport, own: Mapping[str, Tensor], loaded: Mapping[str, Tensor],
             allow_new: Sequence[str], allow_unused: Sequence[str], allow_mismatch: Sequence[str]) -> None:
    """Sort every key of ``own`` (the model's) and of ``loaded`` (the checkpoint's) into ``report``."""
    for key, value in loaded.items():
        if key not in own:
            (report.ignored if any(fnmatch(key, g) for g in allow_unused) else report.unexpected).append(key)
        elif value.shape != own[key].shape:
            (report.allowed_mismatch if any(fnmatch(key, g) for g in allow_mismatch) else report.mismatched).append(
                (key, tuple(value.shape), tuple(own[key].shape)))
        else:
            report.loaded.append(key)
    for key in own:
        if key not in loaded:
            (report.new if any(fnmatch(key, g) for g in allow_new) else report.missing).append(key)


#: The start of the hint for tensors of another shape.
MISMATCH_HINT = ('If the checkpoint was trained for other classes (fine-tuning) and these tensors are to keep the '
                 'model\'s initialisation, allow them')


def _preset_or_globs(keys: Sequence[str], presets: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The presets of ``presets`` that together cover every key (each covering one at least), else globs
    covering them (for the hints)."""
    covers = {name: {k for k in keys if any(fnmatch(k, g) for g in globs)} for name, globs in presets.items()}
    chosen = [name for name, covered in covers.items() if covered]
    return chosen if chosen and set().union(*(covers[n] for n in chosen)) == set(keys) else _globs(keys)


def _lead(report: LoadReport, where: str) -> list[str]:
    """The line that opens a refusal whose only problem presets of :data:`ALLOW_NEW_PRESETS` fix."""
    presets = _preset_or_globs(report.missing, ALLOW_NEW_PRESETS) if report.missing else []
    unused_refused = report.unexpected and where != 'init_cfg'  # init_cfg loads leave unused tensors unused
    if report.mismatched or unused_refused or not presets or presets[0] not in ALLOW_NEW_PRESETS:
        return []
    how = (f"init_cfg=dict(type='Pretrained', checkpoint=..., allow_new={presets})" if where == 'init_cfg' else
           f'--allow-new {" ".join(presets)}')
    names = ' and '.join(PRESET_NAMES[p] for p in presets)
    return [f'{report.model}: the {len(report.missing)} tensors {report.source} lacks are {names}, new by design: '
            f'load it with {how}. The report:']


def model_state_dict(ckpt: Mapping) -> Mapping[str, Tensor]:
    """The state dict in a loaded checkpoint: ``state_dict`` (mmengine), ``model`` (official releases), or itself."""
    return ckpt.get('state_dict', ckpt.get('model', ckpt))


def check_state_dict(model: nn.Module, state_dict: Mapping[str, Tensor], source: str,
                     allow_new: str | Sequence[str] = (), allow_unused: str | Sequence[str] = (),
                     allow_mismatch: str | Sequence[str] = ()) -> tuple[LoadReport, dict[str, Tensor]]:
    """The report of loading ``state_dict`` into the whole ``model``, and the adapted state dict to load
    (without the tensors allowed unused or of another shape); raises if the load would leave the model
    partly loaded.

    Each LiSA backbone inside ``model`` first adapts its part of the keys as its
    ``load_state_dict`` pre-hook will (foreign layouts converted, position tables resized).
    Raises :class:`IncompleteCheckpointError` with the lists if a tensor of the model is
    not in ``state_dict`` (unless it matches an ``allow_new`` glob or preset), has another
    shape (unless it matches an ``allow_mismatch`` glob or preset, e.g. ``'seg_head'``), or a
    tensor of ``state_dict`` is not in the model (unless it matches an ``allow_unused`` glob).
    """
    allow_new, allow_unused = expand_globs(allow_new, 'allow_new'), expand_globs(allow_unused, 'allow_unused')
    allow_mismatch = expand_globs(allow_mismatch, 'allow_mismatch')
    adapted = dict(state_dict)
    for name, module in model.named_modules():
        if hasattr(module, '_adapt_loaded_state_dict'):
            module._adapt_loaded_state_dict(adapted, f'{name}.' if name else '')
    report = LoadReport(type(model).__name__, source, adapted.keys() != state_dict.keys())
    _compare(report, model.state_dict(), adapted, allow_new, allow_unused, allow_mismatch)
    if report.missing or report.mismatched or report.unexpected:
        hint = []
        if report.missing:
            hint.append(f'If the tensors not in the checkpoint are new by design, allow them: allow_new='
                        f'{_preset_or_globs(report.missing, ALLOW_NEW_PRESETS)} (tools/train.py / tools/test.py '
                        '--allow-new).')
        if report.mismatched:
            globs = _preset_or_globs([k for k, _, _ in report.mismatched], ALLOW_MISMATCH_PRESETS)
            hint.append(f'{MISMATCH_HINT}: allow_mismatch={globs} (tools/train.py, test.py or export_onnx.py: '
                        f'--allow-mismatch {shlex.join(globs)}). Otherwise pass the config the checkpoint was '
                        'trained with.')
        if report.unexpected:
            hint.append(f'If the unused tensors are unused by design, allow them: allow_unused='
                        f'{_globs(report.unexpected)}.')
        raise IncompleteCheckpointError('\n'.join([*_lead(report, '--allow-new'), str(report), *hint]), report)
    skipped = {*report.ignored, *(k for k, _, _ in report.allowed_mismatch)}
    return report, {k: v for k, v in adapted.items() if k not in skipped}


def load_checkpoint_strictly(model: nn.Module, filename: str, allow_new: str | Sequence[str] = (),
                             allow_unused: str | Sequence[str] = (), allow_mismatch: str | Sequence[str] = ()
                             ) -> dict:
    """Load a checkpoint of the whole ``model`` (``state_dict`` of mmengine, ``model`` of the official
    releases, or the dict itself; a ``module.`` prefix of a wrapper dropped) after
    :func:`check_state_dict`; returns the checkpoint."""
    ckpt = CheckpointLoader.load_checkpoint(filename, map_location='cpu', logger='current')
    state_dict = {re.sub(r'^module\.', '', k): v for k, v in model_state_dict(ckpt).items()}
    report, to_load = check_state_dict(model, state_dict, filename, allow_new, allow_unused, allow_mismatch)
    model.load_state_dict(to_load, strict=False)  # checked above
    print_log(str(report), logger='current', level=logging.INFO)
    return ckpt


def load_pretrained(model: nn.Module, checkpoint: str, prefix: str | None = None,
                    allow_new: str | Sequence[str] = (), allow_mismatch: str | Sequence[str] = ()) -> LoadReport:
    """Load every tensor of ``model`` from ``checkpoint``, log a report, or raise.

    The state dict is ``ckpt['state_dict']`` (mmengine), ``ckpt['model']`` (the official
    releases) or ``ckpt`` itself; with ``prefix`` (e.g. ``'backbone.'`` of a classifier or a
    detector) only its keys are kept, prefix stripped. Keys are converted and position tables
    resized by :func:`adapt_state_dict`. Raises :class:`IncompleteCheckpointError` if a tensor
    of the model has no counterpart of its shape, unless it matches a glob of ``allow_new``
    (``fnmatch``, e.g. ``'*.attn.step_mlp.*'``, or a name of :data:`ALLOW_NEW_PRESETS`:
    new by design, left as initialised) or, for a tensor of another shape, a glob of
    ``allow_mismatch`` (left as initialised).
    """
    if not is_url(checkpoint) and not osp.exists(checkpoint):
        raise FileNotFoundError(
            f'init_cfg checkpoint {checkpoint!r} does not exist. Pretrain the backbone with its '
            "configs/classification config, or start from a softmax checkpoint (init_cfg's allow_new="
            "['lisa_from_softmax']; each dense config of this project has a *_softmax-in1k-pre_* sibling); "
            '`python tools/train.py CONFIG --dry-run` names both for a config')
    ckpt = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu', logger='current')
    state_dict = model_state_dict(ckpt)
    heads = sorted({k.split('.')[0] + '.' for k in state_dict if '.' in k})
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        state_dict = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if not state_dict:
            raise KeyError(f'no key of checkpoint {checkpoint!r} starts with prefix {prefix!r}; '
                           f'its keys start with {heads}')
    converted, resized = adapt_state_dict(model, state_dict)
    report = LoadReport(type(model).__name__, checkpoint, converted.keys() != state_dict.keys(), resized)
    _compare(report, model.state_dict(), converted, expand_globs(allow_new, 'allow_new'), (),
             expand_globs(allow_mismatch, 'allow_mismatch'))
    if report.missing or report.mismatched:
        hint = []
        if not report.loaded:
            hint.append(f'Nothing matches: is prefix={prefix!r} right? The checkpoint\'s keys start with {heads}.')
        if report.missing:
            hint.append('If the tensors not in the checkpoint are new by design (e.g. LiSA\'s own weights when '
                        'starting from a softmax checkpoint), allow them in init_cfg: '
                        f'allow_new={_preset_or_globs(report.missing, ALLOW_NEW_PRESETS)}.')
        if report.mismatched:
            globs = _preset_or_globs([k for k, _, _ in report.mismatched], ALLOW_MISMATCH_PRESETS)
            hint.append(f'{MISMATCH_HINT} in init_cfg: allow_mismatch={globs}.')
        raise IncompleteCheckpointError('\n'.join([*_lead(report, 'init_cfg'), str(report), *hint]), report)
    model.load_state_dict({k: converted[k] for k in report.loaded}, strict=False)
    print_log(str(report), logger='current', level=logging.INFO)
    return report
