"""The argument checks every LiSA backbone shares: sizes, stage counts, output indices and the
per-stage configs (one dict for every stage, or one per stage), each with one rule and one message."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..attention import check_attention_type


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


def each(cfgs: Mapping | Sequence[Mapping], num: int, name: str, unit: str = 'stage') -> list[Mapping]:
    """One dict per ``unit`` (``num`` of them) from one dict (all) or a list of ``num``: the one rule of
    every per-stage config (``attn_cfgs``, ``block_cfgs``, ``downsample_cfgs``, mmpretrain's ``stage_cfgs``)."""
    if isinstance(cfgs, Mapping):
        return [cfgs] * num
    if not isinstance(cfgs, Sequence) or isinstance(cfgs, str):
        raise TypeError(f'{name} must be a dict or a list of dicts, got {cfgs!r}')
    if len(cfgs) != num:
        raise ValueError(f'{name} has {len(cfgs)} entries; give one dict for all {unit}s or one per {unit} ({num})')
    return list(cfgs)


def expand_attn_cfgs(attn_cfgs: Mapping | Sequence[Mapping], num: int, unit: str = 'stage') -> list[dict]:
    """One ``dict(type=NAME, **kwargs)`` per stage (layer) from one dict (all) or a list (:func:`each`).

    NAME must be registered (:func:`..attention.register_attention`) when this is called: the one
    check of the attention types of a backbone (its blocks are built from the checked configs).
    """
    cfgs = each(attn_cfgs, num, 'attn_cfgs', unit)
    return [check_attention_type(cfg, f'attn_cfgs[{i}]') for i, cfg in enumerate(cfgs)]
