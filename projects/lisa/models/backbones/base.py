"""The base class of every LiSA backbone (PVT, Swin, ViT, BiFormer and any later one).

A backbone subclasses :class:`LiSABackbone` and gets, with one rule and one spelling each:

* ``arch``: a preset of the class's ``arch_zoo`` (case-insensitive) or a dict with exactly
  the keys ``arch_keys`` (:meth:`LiSABackbone.resolve_arch`), as ``self.arch_settings``;
* ``attn_cfgs``: one ``dict(type=NAME, **kwargs)`` for every stage (layer) or one per stage,
  checked against the attention registry once, when the backbone is built
  (:meth:`LiSABackbone.check_stage_args`, :func:`.checks.expand_attn_cfgs`);
* ``out_indices``, ``frozen_stages``, ``upstream`` checked by one rule
  (:meth:`LiSABackbone.check_stage_args`, :mod:`.checks`); :meth:`LiSABackbone.frozen_parts`
  frozen in every ``train()``;
* initialisation from scratch (:func:`init_transformer_weights`) or from a checkpoint
  (``init_cfg=dict(type='Pretrained', ...)``, :func:`.loading.load_pretrained`), and key
  conversion (the class's ``convert_checkpoint``) with position-table resizing in every
  ``load_state_dict`` (``load_from``, ``load_checkpoint``), by a pre-hook.

What it is built from lives beside it: the argument checks in :mod:`.checks`, the blocks of a
stage in :mod:`.blocks`, token-grid helpers in :mod:`.grid`, and the translation of the upstream
backbones' arguments (mmdet's PVT, mmseg/mmdet/mmpretrain's Swin, mmpretrain's ViT) in
:mod:`.upstream`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fnmatch import fnmatch
from typing import ClassVar

from mmengine.model import BaseModule
from mmengine.model.weight_init import constant_init, normal_init, trunc_normal_, trunc_normal_init
from torch import Tensor, nn

from ..attention import ATTENTIONS
from ..options import checked_init
from .checks import check_out_indices, expand_attn_cfgs, num_stages_of
from .loading import adapt_state_dict, load_pretrained


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

    A subclass sets ``arch_zoo`` / ``arch_keys`` (presets), ``UPSTREAMS`` (the vocabularies its
    ``upstream`` argument names, :mod:`.upstream`), ``embeddings`` (glob patterns of
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
    UPSTREAMS: ClassVar[tuple[str | None, ...]] = (None,)  # whose arguments it takes (.upstream); None: its own
    arch_keys: ClassVar[tuple[str, ...]] = ()
    stage_keys: ClassVar[tuple[str, ...]] = ()  # the arch keys that hold one entry per stage
    embeddings: ClassVar[tuple[str, ...]] = ()
    conv_fan_out: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if '__init__' in cls.__dict__:  # an inherited one is checked where it is defined
            checked_init(cls)

    def __init__(self, arch: str | Mapping, init_cfg: dict | None = None, upstream: str | None = None) -> None:
        if isinstance(init_cfg, Sequence) and any(cfg.get('type') == 'Pretrained' for cfg in init_cfg):
            raise ValueError(f'init_cfg={init_cfg!r}: give Pretrained as the one init_cfg dict (not in a list), '
                             'so that the loading is checked')
        super().__init__(init_cfg=init_cfg)
        self.arch_settings = self.resolve_arch(arch)
        if upstream not in self.UPSTREAMS:
            raise ValueError(f'upstream={upstream!r} is not one of {self.UPSTREAMS}')
        self.upstream = upstream
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
