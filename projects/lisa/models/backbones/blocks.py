"""The transformer block of every LiSA backbone, the blocks of a stage, and their stochastic depth."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..attention import ATTENTIONS


class TransformerBlock(nn.Module):
    """Pre-norm transformer block of every backbone::

        x <- x + DropPath(Attn(LN(x), hw_shape))
        x <- x + DropPath(FFN(LN(x)))           FFN = Linear, GELU, Linear

    ``with_cp`` recomputes the block in backward (``torch.utils.checkpoint``,
    RNG state preserved, so dropout masks and results are those without it).
    ``ffn_cfg`` overrides arguments of mmcv's ``FFN`` (e.g. ``feedforward_channels``, ``num_fcs``,
    ``act_cfg``, ``ffn_drop``, ``add_identity``), as mmpretrain's Swin ``ffn_cfgs`` do.
    A subclass may register the two norms under other names (:attr:`norm_names`, hence other
    state-dict keys), read as ``norm1`` / ``norm2`` through properties of its own.
    """

    norm_names: ClassVar[tuple[str, str]] = ('norm1', 'norm2')  # the module names of the two LNs

    def __init__(self, dim: int, attn: nn.Module, ffn_channels: int, drop_rate: float = 0.0,
                 drop_path_rate: float = 0.0, act_cfg: dict = dict(type='GELU'),
                 norm_cfg: dict = dict(type='LN'), with_cp: bool = False, ffn_cfg: Mapping | None = None) -> None:
        super().__init__()
        self.with_cp = with_cp
        self.add_module(self.norm_names[0], build_norm_layer(norm_cfg, dim)[1])
        self.attn = attn
        self.drop_path = DropPath(drop_path_rate)
        self.add_module(self.norm_names[1], build_norm_layer(norm_cfg, dim)[1])
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

    ``attn_cfgs``: configs whose types the backbone has checked once
    (:func:`.checks.expand_attn_cfgs`); each block builds its registered class directly.
    ``block``: :class:`TransformerBlock` or a subclass with its signature (BiFormer's adds a
    positional convolution); ``ffn_cfg``: its FFN's overrides.

    Every attention gets the same context (``..attention.CONTEXT``): ``qkv_bias``,
    ``attn_drop``, ``proj_drop=drop_rate``, ``pos_shape``, ``num_prefix_tokens`` and
    ``block_index=j``; keys of its config override them. An error names the block
    (``where``, e.g. ``'stage 2, '``, and ``j``).
    """
    blocks = []
    for j, (cfg, rate) in enumerate(zip(attn_cfgs, drop_path_rates, strict=True)):
        context = dict(qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop_rate, pos_shape=tuple(pos_shape),
                       num_prefix_tokens=num_prefix_tokens, block_index=j)
        options = {k: v for k, v in cfg.items() if k != 'type'}
        try:
            attn = ATTENTIONS[cfg['type']](dim=dim, num_heads=num_heads, **{**context, **options})
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
