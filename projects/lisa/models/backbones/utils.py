"""Scaffolding shared by the hierarchical LiSA backbones (:mod:`.pvt`, :mod:`.swin`).

* arch presets and per-stage attention configs (:func:`resolve_arch`,
  :func:`stage_attn_cfgs`, :func:`build_stage_attention`);
* the pre-norm transformer block both architectures use (:class:`TransformerBlock`);
* freezing and from-scratch initialisation (:func:`freeze`, :func:`init_transformer_weights`);
* pretrained loading with key conversion, resizing of position tables and a
  report of what was and was not loaded (:func:`load_pretrained`).
"""
from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmengine.logging import print_log
from mmengine.model.weight_init import constant_init, normal_init, trunc_normal_init
from mmengine.runner import CheckpointLoader
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..attention import ATTENTIONS, KernelAttention, build_attention
from ..attention.base import resize_grid, static_sizes


def resolve_arch(arch: str | Mapping, arch_zoo: Mapping[str, dict], keys: Sequence[str]) -> dict:
    """Return the settings of a preset name (case-insensitive) or check a custom dict."""
    if isinstance(arch, str):
        if arch.lower() not in arch_zoo:
            raise ValueError(f'arch={arch!r} is not one of {sorted(arch_zoo)}; '
                             f'or pass a dict with the keys {sorted(keys)}')
        return dict(arch_zoo[arch.lower()])
    if not isinstance(arch, Mapping) or set(arch) != set(keys):
        raise ValueError(f'a custom arch must be a dict with exactly the keys {sorted(keys)}, got {arch!r}')
    return dict(arch)


def num_stages_of(settings: Mapping, list_keys: Sequence[str]) -> int:
    """The common length of the per-stage lists of an arch, or raise."""
    lengths = {k: len(settings[k]) for k in list_keys}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise ValueError(f'arch lists must have one entry per stage (same non-zero length), got lengths {lengths}')
    return next(iter(lengths.values()))


def check_stage_indices(out_indices: Sequence[int], frozen_stages: int, num_stages: int) -> tuple[int, ...]:
    out_indices = tuple(out_indices)
    if not out_indices or any(not 0 <= i < num_stages for i in out_indices) or len(set(out_indices)) < len(out_indices):
        raise ValueError(f'out_indices={out_indices} must be distinct stage indices in [0, {num_stages})')
    if not -1 <= frozen_stages <= num_stages:
        raise ValueError(f'frozen_stages={frozen_stages} must be in [-1, {num_stages}]')
    return out_indices


def stage_attn_cfgs(attn_cfgs: Mapping | Sequence[Mapping], num_stages: int, valid_types: Sequence[str]) -> list[dict]:
    """One ``dict(type=NAME, **kwargs)`` per stage from one dict (all stages) or a list."""
    if isinstance(attn_cfgs, Mapping):
        cfgs = [attn_cfgs] * num_stages
    elif isinstance(attn_cfgs, Sequence) and not isinstance(attn_cfgs, str):
        if len(attn_cfgs) != num_stages:
            raise ValueError(f'attn_cfgs has {len(attn_cfgs)} entries; give one dict for all stages '
                             f'or a list of one dict per stage ({num_stages})')
        cfgs = list(attn_cfgs)
    else:
        raise TypeError(f'attn_cfgs must be a dict or a list of dicts, got {attn_cfgs!r}')
    for i, cfg in enumerate(cfgs):
        if not isinstance(cfg, Mapping) or cfg.get('type') not in valid_types:
            raise ValueError(f'attn_cfgs[{i}]={cfg!r}: expected dict(type=NAME, ...) '
                             f'with NAME one of {sorted(valid_types)}')
    return [dict(cfg) for cfg in cfgs]


def build_stage_attention(cfg: Mapping, dim: int, num_heads: int, *, stage: int, qkv_bias: bool,
                          attn_drop: float, proj_drop: float, pos_shape: Sequence[int]) -> nn.Module:
    """Build an attention of :mod:`..attention` with the backbone's defaults.

    Every attention gets ``qkv_bias`` and ``proj_drop``; softmax also gets
    ``attn_drop``; kernel attentions (linear, FLatten, LiSA) get ``pos_shape``,
    the stage's grid at the pretraining size. Keys of ``cfg`` override these.
    """
    defaults = dict(qkv_bias=qkv_bias, proj_drop=proj_drop)
    if issubclass(ATTENTIONS[cfg['type']], KernelAttention):
        defaults['pos_shape'] = tuple(pos_shape)
    else:
        defaults['attn_drop'] = attn_drop
    try:
        return build_attention(cfg, dim, num_heads, **defaults)
    except (TypeError, ValueError) as e:
        raise type(e)(f'stage {stage} attention {dict(cfg)}: {e}') from e


class TransformerBlock(nn.Module):
    """Pre-norm transformer block of PVT and Swin::

        x <- x + DropPath(Attn(LN(x), hw_shape))
        x <- x + DropPath(FFN(LN(x)))           FFN = Linear, GELU, Linear

    ``with_cp`` recomputes the block in backward (``torch.utils.checkpoint``,
    RNG state preserved, so dropout masks and results are those without it).
    """

    def __init__(self, dim: int, attn: nn.Module, mlp_ratio: float, drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'), with_cp: bool = False) -> None:
        super().__init__()
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, dim)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path_rate)
        self.norm2 = build_norm_layer(norm_cfg, dim)[1]
        self.ffn = FFN(embed_dims=dim, feedforward_channels=int(mlp_ratio * dim), act_cfg=act_cfg,
                       ffn_drop=drop_rate, dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate))

    def _forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        return self.ffn(self.norm2(x), identity=x)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        if self.with_cp and x.requires_grad:
            return checkpoint(self._forward, x, hw_shape, use_reentrant=False)
        return self._forward(x, hw_shape)


def nlc_to_nchw(x: Tensor, hw_shape: Sequence[int]) -> Tensor:
    b, _, c = x.shape
    return x.transpose(1, 2).reshape(b, c, *hw_shape)


def resize_grid_tokens(tokens: Tensor, src_hw: Sequence[int], dst_hw: Sequence[int], mode: str) -> Tensor:
    """Resize ``(1, h*w, C)`` tokens on an ``(h, w)`` grid to ``(1, H*W, C)`` (:func:`resize_grid`)."""
    if static_sizes(*dst_hw) and tuple(src_hw) == tuple(dst_hw):
        return tokens
    grid = resize_grid(tokens.reshape(*src_hw, tokens.shape[-1]), tuple(dst_hw), mode)
    return grid.reshape(1, -1, grid.shape[-1])


def freeze(*parts: nn.Module | nn.Parameter) -> None:
    """Stop gradients of ``parts``; modules also go to eval mode (dropout off)."""
    for part in parts:
        if isinstance(part, nn.Parameter):
            part.requires_grad = False
        else:
            part.eval()
            for p in part.parameters():
                p.requires_grad = False


def init_transformer_weights(model: nn.Module, conv_fan_out: bool) -> None:
    """From-scratch init of PVT / Swin: trunc-normal(0.02) Linear, unit LayerNorm,
    with ``conv_fan_out`` He-normal (fan-out) convolutions as PVT does; then each
    attention's own ``reset_parameters`` (LiSA's step MLP starts geometric)."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            trunc_normal_init(m, std=0.02, bias=0.0)
        elif isinstance(m, nn.LayerNorm):
            constant_init(m, val=1.0, bias=0.0)
        elif conv_fan_out and isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            normal_init(m, mean=0.0, std=math.sqrt(2.0 / fan_out))
    attentions = tuple(ATTENTIONS.values())
    for m in model.modules():
        if isinstance(m, attentions) and hasattr(m, 'reset_parameters'):
            m.reset_parameters()


def is_pretrained(init_cfg: Mapping | None) -> bool:
    return isinstance(init_cfg, Mapping) and init_cfg.get('type') == 'Pretrained'


@dataclass
class LoadReport:
    """What :func:`load_pretrained` did, tensor by tensor."""
    model: str
    source: str
    converted: bool
    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)      # in the model, not in the checkpoint
    unexpected: list[str] = field(default_factory=list)   # in the checkpoint, not in the model
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # key, checkpoint, model shape
    resized: list[tuple[str, tuple, tuple]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def __str__(self) -> str:
        total = len(self.loaded) + len(self.missing) + len(self.mismatched)
        how = ' (key names converted)' if self.converted else ''
        lines = [f'{self.model}: loaded {len(self.loaded)} of {total} tensors from {self.source}{how}']
        if self.resized:
            lines.append(f'  resized position tables ({len(self.resized)}): '
                         + ', '.join(f'{k} {a} -> {b}' for k, a, b in self.resized))
        if self.missing:
            lines.append(f'  newly initialised, not in the checkpoint ({len(self.missing)}): '
                         + ', '.join(self.missing))
        if self.mismatched:
            lines.append(f'  shape mismatch, left initialised ({len(self.mismatched)}): '
                         + ', '.join(f'{k} checkpoint {a} vs model {b}' for k, a, b in self.mismatched))
        if self.unexpected:
            lines.append(f'  unused, not in this model ({len(self.unexpected)}): ' + ', '.join(self.unexpected))
        return '\n'.join(lines)


def _square_side(length: int) -> int | None:
    side = math.isqrt(length)
    return side if side * side == length else None


def resize_position_table(model: nn.Module, key: str, value: Tensor, shape: torch.Size) -> Tensor | None:
    """``value`` resized bicubically to ``shape`` if ``key`` is a position table, else None.

    Position tables: ``relative_position_bias_table`` ``((2w-1)^2, heads)`` (Swin),
    and ``(1, h*w, C)`` tensors of a module with a ``pos_shape`` attribute (PVT's
    absolute position embedding, the kernel attentions' positional encoding).
    The checkpoint's grid must be square (it is for ImageNet checkpoints).
    """
    if key.endswith('relative_position_bias_table'):
        s1, s2 = _square_side(value.shape[0]), _square_side(shape[0])
        if value.dim() != 2 or value.shape[1] != shape[1] or None in (s1, s2):
            return None
        table = value.T.reshape(1, -1, s1, s1)
        return F.interpolate(table, size=(s2, s2), mode='bicubic', align_corners=False).reshape(-1, s2 * s2).T
    pos_shape = getattr(model.get_submodule(key.rpartition('.')[0]), 'pos_shape', None)
    if pos_shape is None or value.dim() != 3 or value.shape[0] != 1 or value.shape[2] != shape[2]:
        return None
    side = _square_side(value.shape[1])
    return None if side is None else resize_grid_tokens(value, (side, side), pos_shape, 'bicubic')


def load_pretrained(model: nn.Module, checkpoint: str, prefix: str | None = None,
                    convert: Callable[[dict], dict] = dict) -> LoadReport:
    """Load a checkpoint into ``model`` as far as names and shapes allow, and log a report.

    The state dict is ``ckpt['state_dict']`` (mmengine), ``ckpt['model']`` (the
    official releases) or ``ckpt`` itself; with ``prefix`` (e.g. ``'backbone.'``
    of an mmpretrain classifier) only its keys are kept, prefix stripped.
    ``convert`` renames foreign key layouts; position tables of another size
    are resized; tensors of any other shape mismatch stay as initialised. The
    report lists the newly initialised, unused, mismatched and resized tensors.
    """
    ckpt = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu', logger='current')
    state_dict = ckpt.get('state_dict', ckpt.get('model', ckpt))
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        state_dict = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        if not state_dict:
            raise KeyError(f'no key of checkpoint {checkpoint!r} starts with prefix {prefix!r}')
    converted = convert(state_dict)
    report = LoadReport(type(model).__name__, checkpoint, converted.keys() != state_dict.keys())

    own = model.state_dict()
    loadable = {}
    for key, value in converted.items():
        if key not in own:
            report.unexpected.append(key)
            continue
        if value.shape != own[key].shape:
            resized = resize_position_table(model, key, value, own[key].shape)
            if resized is None:
                report.mismatched.append((key, tuple(value.shape), tuple(own[key].shape)))
                continue
            report.resized.append((key, tuple(value.shape), tuple(resized.shape)))
            value = resized
        loadable[key] = value
    model.load_state_dict(loadable, strict=False)
    mismatched = {k for k, _, _ in report.mismatched}
    report.loaded = list(loadable)
    report.missing = [k for k in own if k not in loadable and k not in mismatched]
    print_log(str(report), logger='current', level=logging.INFO if report.complete else logging.WARNING)
    return report
