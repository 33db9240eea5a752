"""The attention registry: every type by name, built through one constructor contract (:data:`CONTEXT`).

:func:`register_attention` adds a type, whose options are then checked against its constructor's
type hints whenever it is built (:func:`..options.checked_init`); :func:`check_attention_type` is the
one check of an attention config (a ValueError naming the bad type and the registered ones), and
:func:`build_attention` builds from ``dict(type=NAME, **kwargs)``.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from torch import nn

from ..options import checked_init

ATTENTIONS: dict[str, type[nn.Module]] = {}
#: Keyword arguments a backbone passes to every attention it builds, whatever its type: the
#: constructor contract is ``cls(dim, num_heads, *, qkv_bias, attn_drop, proj_drop, pos_shape,
#: num_prefix_tokens, block_index, **options)``. ``pos_shape`` is the ``(H, W)`` grid at the
#: pretraining size, ``block_index`` the block's index within its stage (Swin's window attention
#: shifts in odd blocks); an attention ignores what does not apply to it (kernel attentions
#: form no attention probabilities to drop out, softmax has no position table).
CONTEXT = ('qkv_bias', 'attn_drop', 'proj_drop', 'pos_shape', 'num_prefix_tokens', 'block_index')


def register_attention(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Register an attention class under ``name`` for :func:`build_attention`.

    The class must accept ``dim``, ``num_heads`` and the keywords of :data:`CONTEXT`; each of its
    options is checked against its type hint when it is built (:func:`..options.checked_init`).
    """

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if name in ATTENTIONS:
            raise KeyError(f'attention {name!r} is already registered')
        params = inspect.signature(cls).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            lacking = [k for k in ('dim', 'num_heads', *CONTEXT) if k not in params]
            if lacking:
                raise TypeError(f'attention {name!r} ({cls.__name__}) must accept the keyword arguments '
                                f'{lacking} of the attention contract (projects.lisa.models.attention.CONTEXT)')
        ATTENTIONS[name] = checked_init(cls)
        return cls

    return wrap


def check_attention_type(cfg: object, where: str = 'attention cfg') -> dict:
    """``cfg`` as a dict if it is ``dict(type=NAME, ...)`` with NAME registered now, else a ValueError
    naming ``where``, the bad value and the registered types: the one check of an attention config."""
    if not isinstance(cfg, Mapping):
        raise ValueError(f'{where}={cfg!r}: expected dict(type=NAME, ...) with NAME one of {sorted(ATTENTIONS)}')
    if cfg.get('type') not in ATTENTIONS:
        raise ValueError(f"{where}={dict(cfg)!r}: unknown attention type {cfg.get('type')!r}; "
                         f'registered types: {sorted(ATTENTIONS)}')
    return dict(cfg)


def build_attention(cfg: Mapping | str, dim: int, num_heads: int, **context) -> nn.Module:
    """Build an attention from ``dict(type=NAME, **kwargs)`` (or just ``NAME``).

    ``context`` holds the keywords of :data:`CONTEXT` that the caller (a backbone)
    supplies; keys in ``cfg`` override them.
    """
    cfg = check_attention_type({'type': cfg} if isinstance(cfg, str) else cfg)
    name = cfg.pop('type')
    return ATTENTIONS[name](dim=dim, num_heads=num_heads, **{**context, **cfg})
