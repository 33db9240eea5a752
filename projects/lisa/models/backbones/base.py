"""What every LiSA backbone is built from (PVT, Swin, ViT and any later one).

A backbone subclasses :class:`LiSABackbone` and gets, with one rule and one spelling each:

* ``arch``: a preset of the class's ``arch_zoo`` (case-insensitive) or a dict with exactly
  the keys ``arch_keys`` (:meth:`LiSABackbone.resolve_arch`), as ``self.arch_settings``;
* ``attn_cfgs``: one ``dict(type=NAME, **kwargs)`` for every stage (layer) or one per stage,
  checked against the attention registry when the backbone is built (:func:`expand_attn_cfgs`);
* :func:`build_blocks`: the :class:`TransformerBlock` s of a stage, each attention built with
  the context every type receives (``..attention.CONTEXT``), so no backbone asks which class
  it gets;
* ``out_indices``, ``frozen_stages``, ``pretrain_img_size`` checked by one rule
  (:meth:`LiSABackbone.check_stage_args`, :func:`to_pair`); :meth:`LiSABackbone.frozen_parts`
  frozen in every ``train()``;
* the constructor arguments of the upstream backbone a class stands in for (mmdet's PVT,
  mmseg/mmdet/mmpretrain's Swin, mmpretrain's ViT), translated to its own by
  :func:`accepts_upstream_args` (:func:`one_vocabulary`, :func:`set_attn_arg`);
* initialisation from scratch (:func:`init_transformer_weights`) or from a checkpoint
  (``init_cfg=dict(type='Pretrained', ...)``, :func:`.loading.load_pretrained`), and key
  conversion (the class's ``convert_checkpoint``) with position-table resizing in every
  ``load_state_dict`` (``load_from``, ``load_checkpoint``), by a pre-hook.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatch
from typing import ClassVar

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmengine.model import BaseModule
from mmengine.model.weight_init import constant_init, normal_init, trunc_normal_, trunc_normal_init
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..attention import ATTENTIONS, build_attention, check_attention_type
from ..attention.layers import resize_grid, static_sizes
from ..options import checked_init
from .loading import adapt_state_dict, load_pretrained


def to_pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``size`` as ``(H, W)`` from an int or a pair of positive ints, else raise."""
    pair = (size, size) if isinstance(size, int) else tuple(size) if isinstance(size, Sequence) else ()
    if len(pair) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in pair):
        raise ValueError(f'{name}={size!r} must be a positive int or a pair of them (H, W)')
    return pair


def num_stages_of(settings: Mapping, list_keys: Sequence[str]) -> int:
    """The common length of the per-stage lists of an arch, or raise."""
    lengths = {k: len(settings[k]) for k in list_keys}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise ValueError(f'arch lists must have one entry per stage (same non-zero length), got lengths {lengths}')
    return next(iter(lengths.values()))


def check_out_indices(out_indices: int | Sequence[int], num: int, unit: str = 'stage') -> tuple[int, ...]:
    """Distinct indices of ``num`` stages (layers), negative ones from the end, sorted."""
    indices = [out_indices] if isinstance(out_indices, int) else out_indices
    if (not isinstance(indices, Sequence) or isinstance(indices, str) or not indices
            or any(not isinstance(i, int) or not -num <= i < num for i in indices)
            or len({i % num for i in indices}) < len(indices)):
        raise ValueError(f'out_indices={out_indices!r} must be an int or a list of distinct {unit} '
                         f'indices in [-{num}, {num})')
    return tuple(sorted(i % num for i in indices))


def expand_attn_cfgs(attn_cfgs: Mapping | Sequence[Mapping], num: int, unit: str = 'stage') -> list[dict]:
    """One ``dict(type=NAME, **kwargs)`` per stage (layer) from one dict (all) or a list.

    NAME must be registered (:func:`..attention.register_attention`) when this is called.
    """
    if isinstance(attn_cfgs, Mapping):
        attn_cfgs = [attn_cfgs] * num
    elif not isinstance(attn_cfgs, Sequence) or isinstance(attn_cfgs, str):
        raise TypeError(f'attn_cfgs must be a dict or a list of dicts, got {attn_cfgs!r}')
    elif len(attn_cfgs) != num:
        raise ValueError(f'attn_cfgs has {len(attn_cfgs)} entries; give one dict for all {unit}s '
                         f'or a list of one dict per {unit} ({num})')
    return [check_attention_type(cfg, f'attn_cfgs[{i}]') for i, cfg in enumerate(attn_cfgs)]


def one_vocabulary(backbone: str, kwargs: Mapping, upstream: str, upstream_keys: Sequence[str],
                   own_keys: Sequence[str]) -> bool:
    """Whether ``kwargs`` speak the ``upstream`` backbone's vocabulary (name one of
    ``upstream_keys``); raise if they also name one of this backbone's own ``own_keys``."""
    theirs, ours = sorted(set(kwargs) & set(upstream_keys)), sorted(set(kwargs) & set(own_keys))
    if theirs and ours:
        raise TypeError(f'{backbone} got arguments of {upstream} ({", ".join(theirs)}) and its own '
                        f'({", ".join(ours)}); use one vocabulary per call')
    return bool(theirs)


def named_upstream(backbone: str, kwargs: Mapping, upstreams: Sequence[str | None], own_keys: Sequence[str]
                   ) -> str | None:
    """The upstream library that ``kwargs`` name with ``upstream=NAME`` (None if they name none):
    one of ``upstreams``, else ValueError; with one of this backbone's ``own_keys``, TypeError.

    A call that fits both vocabularies (no argument only the upstream backbone has) builds this
    backbone's own model; ``upstream=NAME`` makes it the upstream one, defaults included.
    """
    upstream = kwargs.get('upstream')
    if upstream not in upstreams:
        raise ValueError(f'{backbone}: upstream={upstream!r} is not one of {list(upstreams)}')
    ours = sorted(set(kwargs) & set(own_keys))
    if upstream is not None and ours:
        raise TypeError(f'{backbone} got upstream={upstream!r} and its own arguments ({", ".join(ours)}); '
                        'use one vocabulary per call')
    return upstream


def accepts_upstream_args(translate: Callable[[dict], dict]) -> Callable:
    """Decorate a backbone's ``__init__`` so that it also takes the arguments of the upstream
    backbone it stands in for: ``translate(kwargs)`` returns the call in this backbone's own
    arguments (unchanged when it names none of the upstream ones) or raises."""
    def wrap(init: Callable) -> Callable:
        @functools.wraps(init)
        def __init__(self, *args, **kwargs) -> None:
            init(self, *args, **(kwargs if args else translate(kwargs)))  # positional: own vocabulary
        return __init__
    return wrap


def set_attn_arg(attn_cfgs: Mapping | Sequence[Mapping], num: int, arg: str, key: str, values: Sequence,
                 attn_type: str, neutral: object = None, given: bool = True) -> list[dict]:
    """One attention config per stage with ``key=values[i]`` set where the stage's type is
    ``attn_type`` (the upstream argument ``arg`` holds one value per stage).

    ``given`` (the caller passed ``arg``): raises if a stage's own config sets another value,
    if a stage of another type gets a value other than ``neutral`` (it has no such parameter;
    ``neutral=None``: it is not checked), or if no stage is of ``attn_type`` (the argument would
    configure nothing). Not ``given`` (the upstream default): fills the stages that set none.
    """
    cfgs = [dict(c) for c in ([attn_cfgs] * num if isinstance(attn_cfgs, Mapping) else attn_cfgs)]
    if len(values) != len(cfgs):
        raise ValueError(f'{arg}={list(values)} needs one entry per stage ({len(cfgs)})')
    if given and not any(c.get('type') == attn_type for c in cfgs):
        raise ValueError(f'{arg}={list(values)} configures the {attn_type!r} attention, which no stage uses '
                         f'(attn_cfgs={cfgs}); pass {arg}=None')
    for i, (cfg, value) in enumerate(zip(cfgs, values)):
        if cfg.get('type') == attn_type:
            if cfg.setdefault(key, value) != value and given:
                raise ValueError(f'{arg}[{i}]={value!r} conflicts with attn_cfgs[{i}]={cfg}')
        elif given and neutral is not None and value != neutral:
            raise ValueError(f'{arg}[{i}]={value!r}: stage {i} uses the {cfg.get("type")!r} attention, which has '
                             f'no {key} (only {neutral!r} is meaningful there)')
    return cfgs


def reject_unsupported(backbone: str, kwargs: Mapping, supported: Mapping[str, object], reason: Mapping[str, str]
                       ) -> None:
    """Raise for an upstream argument whose value this backbone does not implement:
    ``supported[name]`` is the one value it takes, ``reason[name]`` says why."""
    for name, value in supported.items():
        if name in kwargs and kwargs[name] != value:
            raise ValueError(f'{backbone}: {name}={kwargs[name]!r} is not supported ({reason[name]}); '
                             f'only {name}={value!r}')


def pretrained_to_init_cfg(kwargs: dict) -> None:
    """mmdet's / mmseg's ways to name a checkpoint as this backbone's ``init_cfg``: the deprecated
    ``pretrained=PATH``, and ``init_cfg=dict(checkpoint=PATH)`` without a type (both Pretrained)."""
    pretrained, init_cfg = kwargs.pop('pretrained', None), kwargs.get('init_cfg')
    if pretrained is not None:
        if not isinstance(pretrained, str) or init_cfg is not None:
            raise TypeError(f'pretrained={pretrained!r} must be a path and cannot be given with init_cfg')
        kwargs['init_cfg'] = dict(type='Pretrained', checkpoint=pretrained)
    elif isinstance(init_cfg, Mapping) and 'checkpoint' in init_cfg and 'type' not in init_cfg:
        kwargs['init_cfg'] = dict(type='Pretrained', **init_cfg)


class TransformerBlock(nn.Module):
    """Pre-norm transformer block of every backbone::

        x <- x + DropPath(Attn(LN(x), hw_shape))
        x <- x + DropPath(FFN(LN(x)))           FFN = Linear, GELU, Linear

    ``with_cp`` recomputes the block in backward (``torch.utils.checkpoint``,
    RNG state preserved, so dropout masks and results are those without it).
    ``ffn_cfg`` overrides arguments of mmcv's ``FFN`` (e.g. ``feedforward_channels``, ``num_fcs``,
    ``act_cfg``, ``ffn_drop``, ``add_identity``), as mmpretrain's Swin ``ffn_cfgs`` do.
    """

    def __init__(self, dim: int, attn: nn.Module, ffn_channels: int, drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'), with_cp: bool = False, ffn_cfg: Mapping | None = None) -> None:
        super().__init__()
        self.with_cp = with_cp
        self.norm1 = build_norm_layer(norm_cfg, dim)[1]
        self.attn = attn
        self.drop_path = DropPath(drop_path_rate)
        self.norm2 = build_norm_layer(norm_cfg, dim)[1]
        self.ffn = FFN(**{'embed_dims': dim, 'feedforward_channels': ffn_channels, 'act_cfg': act_cfg,
                          'ffn_drop': drop_rate, 'dropout_layer': dict(type='DropPath', drop_prob=drop_path_rate),
                          **(ffn_cfg or {})})

    def _forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
        return self.ffn(self.norm2(x), identity=x)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        if self.with_cp and x.requires_grad:
            return checkpoint(self._forward, x, hw_shape, use_reentrant=False)
        return self._forward(x, hw_shape)


def build_blocks(attn_cfgs: Sequence[Mapping], dim: int, num_heads: int, ffn_channels: int,
                 drop_path_rates: Sequence[float], where: str = '', *, qkv_bias: bool, attn_drop: float,
                 drop_rate: float, pos_shape: Sequence[int], num_prefix_tokens: int = 0,
                 act_cfg: dict = dict(type='GELU'), norm_cfg: dict = dict(type='LN'), with_cp: bool = False,
                 ffn_cfg: Mapping | None = None, block: type[TransformerBlock] = TransformerBlock
                 ) -> list[TransformerBlock]:
    """The :class:`TransformerBlock` s of a stage, block ``j`` with the attention of ``attn_cfgs[j]``.

    ``block``: :class:`TransformerBlock` or a subclass with its signature (BiFormer's adds a
    positional convolution); ``ffn_cfg``: its FFN's overrides.

    Every attention gets the same context (``..attention.CONTEXT``): ``qkv_bias``,
    ``attn_drop``, ``proj_drop=drop_rate``, ``pos_shape``, ``num_prefix_tokens`` and
    ``block_index=j``; keys of its config override them. An error names the block
    (``where``, e.g. ``'stage 2, '``, and ``j``).
    """
    blocks = []
    for j, (cfg, rate) in enumerate(zip(attn_cfgs, drop_path_rates, strict=True)):
        try:
            attn = build_attention(cfg, dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop_rate,
                                   pos_shape=tuple(pos_shape), num_prefix_tokens=num_prefix_tokens, block_index=j)
        except (TypeError, ValueError) as e:
            raise type(e)(f'{where}block {j}: attention {dict(cfg)}: {e}') from e
        blocks.append(block(dim, attn, ffn_channels, drop_rate, rate, act_cfg, norm_cfg, with_cp, ffn_cfg=ffn_cfg))
    return blocks


def stage_drop_path_rates(drop_path_rate: float, depths: Sequence[int]) -> list[list[float]]:
    """Stochastic depth rising linearly over all blocks of all stages, split per stage.

    Block ``b`` (counted over every stage, ``B = sum(depths)`` in all) drops its residual branches
    with probability ``drop_path_rate * b / (B - 1)``; stage ``i`` gets the rates of its ``depths[i]``
    blocks (the schedule of PVT, Swin and BiFormer).
    """
    rates = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
    starts = [sum(depths[:i]) for i in range(len(depths))]
    return [rates[start:start + depth] for start, depth in zip(starts, depths, strict=True)]


def nlc_to_nchw(x: Tensor, hw_shape: Sequence[int]) -> Tensor:
    """Tokens ``(B, H*W, C)`` as a contiguous ``(B, C, H, W)`` map. Not a channels-last view: kernels
    that read raw memory as NCHW (mmcv's RoIAlign, open-mmlab/mmcv#2203) would take it for one."""
    b, _, c = x.shape
    return x.transpose(1, 2).reshape(b, c, *hw_shape).contiguous()


def resize_grid_tokens(tokens: Tensor, src_hw: Sequence[int], dst_hw: Sequence[int], mode: str) -> Tensor:
    """Resize ``(1, h*w, C)`` tokens on an ``(h, w)`` grid to ``(1, H*W, C)`` (:func:`resize_grid`)."""
    if static_sizes(*dst_hw) and tuple(src_hw) == tuple(dst_hw):
        return tokens
    grid = resize_grid(tokens.reshape(*src_hw, tokens.shape[-1]), tuple(dst_hw), mode)
    return grid.reshape(1, -1, grid.shape[-1])


def freeze(*parts: nn.Module | nn.Parameter | None) -> None:
    """Stop gradients of ``parts``; modules also go to eval mode (dropout off)."""
    for part in parts:
        if isinstance(part, nn.Parameter):
            part.requires_grad = False
        elif part is not None:
            part.eval()
            for p in part.parameters():
                p.requires_grad = False


def init_transformer_weights(model: nn.Module, conv_fan_out: bool) -> None:
    """From-scratch init: trunc-normal(0.02) Linear, unit LayerNorm, with ``conv_fan_out``
    He-normal (fan-out) convolutions as PVT does; then :func:`reset_attentions`."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            trunc_normal_init(m, std=0.02, bias=0.0)
        elif isinstance(m, nn.LayerNorm):
            constant_init(m, val=1.0, bias=0.0)
        elif conv_fan_out and isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            normal_init(m, mean=0.0, std=math.sqrt(2.0 / fan_out))
    reset_attentions(model)


def reset_attentions(model: nn.Module) -> None:
    """Each attention's own ``reset_parameters`` (LiSA's step MLP starts geometric, Swin's
    tables trunc-normal), after a layer-wide init has overwritten them."""
    attentions = tuple(ATTENTIONS.values())
    for m in model.modules():
        if isinstance(m, attentions) and hasattr(m, 'reset_parameters'):
            m.reset_parameters()


class LiSABackbone(BaseModule):
    """Base of the LiSA backbones: arch presets, freezing, initialisation and loading.

    A subclass sets ``arch_zoo`` / ``arch_keys`` (presets), ``embeddings`` (glob patterns of
    the parameters drawn from trunc-normal(0.02) from scratch: position embeddings, class
    token), ``conv_fan_out`` (He-normal convolutions, PVT), implements :meth:`frozen_parts`
    and, for foreign checkpoint layouts, the static ``convert_checkpoint``; it calls
    ``self._freeze_stages()`` at the end of its ``__init__``.

    ``init_cfg=dict(type='Pretrained', checkpoint=..., prefix=None, allow_new=())`` loads a
    checkpoint by :func:`.loading.load_pretrained`: every tensor of the model must come from
    it, except those matching a glob of ``allow_new`` (new by design, e.g.
    ``['*.attn.step_mlp.*']`` for LiSA from a softmax checkpoint), else it raises.

    A subclass's constructor options are checked against its type hints whenever it is built,
    the upstream backbone's arguments it shares included (:func:`..options.checked_init`).
    """

    arch_zoo: ClassVar[dict[str, dict]] = {}
    arch_keys: ClassVar[tuple[str, ...]] = ()
    stage_keys: ClassVar[tuple[str, ...]] = ()  # the arch keys that hold one entry per stage
    embeddings: ClassVar[tuple[str, ...]] = ()
    conv_fan_out: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if '__init__' in cls.__dict__:  # an inherited one is checked where it is defined
            checked_init(cls)

    def __init__(self, arch: str | Mapping, init_cfg: dict | None = None) -> None:
        if isinstance(init_cfg, Sequence) and any(cfg.get('type') == 'Pretrained' for cfg in init_cfg):
            raise ValueError(f'init_cfg={init_cfg!r}: give Pretrained as the one init_cfg dict (not in a list), '
                             'so that the loading is checked')
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self.resolve_arch(arch)
        self._register_load_state_dict_pre_hook(self._adapt_loaded_state_dict)

    @property
    def num_stages(self) -> int:
        """The common length of the arch's per-stage lists (:attr:`stage_keys`), or raise."""
        return num_stages_of(self.arch_settings, self.stage_keys)

    @classmethod
    def resolve_arch(cls, arch: str | Mapping) -> dict:
        """The settings of a preset name (case-insensitive), or a checked custom dict."""
        if isinstance(arch, str):
            if arch.lower() not in cls.arch_zoo:
                raise ValueError(f'arch={arch!r} is not one of {sorted(cls.arch_zoo)}; '
                                 f'or pass a dict with the keys {sorted(cls.arch_keys)}')
            return dict(cls.arch_zoo[arch.lower()])
        if not isinstance(arch, Mapping) or set(arch) != set(cls.arch_keys):
            raise ValueError(f'a custom arch must be a dict with exactly the keys {sorted(cls.arch_keys)}, '
                             f'got {arch!r}')
        return dict(arch)

    def check_stage_args(self, num: int, out_indices: int | Sequence[int], frozen_stages: int,
                          attn_cfgs: Mapping | Sequence[Mapping], unit: str = 'stage') -> list[dict]:
        """Set the checked ``out_indices`` and ``frozen_stages`` of ``num`` stages (layers);
        return one attention config per stage (:func:`expand_attn_cfgs`)."""
        self.out_indices = check_out_indices(out_indices, num, unit)
        if not -1 <= frozen_stages <= num:
            raise ValueError(f'frozen_stages={frozen_stages} must be in [-1, {num}]')
        self.frozen_stages = frozen_stages
        return expand_attn_cfgs(attn_cfgs, num, unit)

    @staticmethod
    def convert_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Foreign key layouts renamed to this backbone's; its own layout passes unchanged."""
        return dict(state_dict)

    def frozen_parts(self) -> list[nn.Module | nn.Parameter | None]:
        """The modules and parameters ``frozen_stages`` freezes."""
        raise NotImplementedError

    def _freeze_stages(self) -> None:
        freeze(*self.frozen_parts())

    def train(self, mode: bool = True) -> LiSABackbone:
        super().train(mode)
        self._freeze_stages()
        return self

    def init_weights(self) -> None:
        init_transformer_weights(self, self.conv_fan_out)
        for name, p in self.named_parameters():
            if any(fnmatch(name, pattern) for pattern in self.embeddings):
                trunc_normal_(p, std=0.02)
        if isinstance(self.init_cfg, Mapping) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, **{k: v for k, v in self.init_cfg.items() if k != 'type'})
        elif self.init_cfg is not None:
            super().init_weights()  # e.g. dict(type='Kaiming', layer='Linear'): every Linear, the step MLP's too
            reset_attentions(self)

    def _adapt_loaded_state_dict(self, state_dict: dict, prefix: str, *args) -> None:
        """Pre-hook of every ``load_state_dict``: this backbone's keys (under ``prefix``)
        converted from foreign layouts and position tables resized to this model's."""
        own = {k[len(prefix):]: state_dict.pop(k) for k in [k for k in state_dict if k.startswith(prefix)]}
        if isinstance(own.get('model'), Mapping):  # an official release, {'model': state_dict}, as load_checkpoint
            own.update(own.pop('model'))          # (load_from) passes it: mmengine unwraps only 'state_dict'
        state_dict.update((prefix + k, v) for k, v in adapt_state_dict(self, own)[0].items())
