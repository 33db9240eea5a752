"""Swin Transformer with a selectable attention per stage.

Swin Transformer (Liu et al., ICCV 2021, https://arxiv.org/abs/2103.14030) as
the LiSA paper uses it (§2 of the notes, following FLatten-Swin): LiSA over the
whole feature map in stages 1-2, the original shifted 7x7 window softmax
attention in stages 3-4. With ``'window'`` in every stage the model is mmseg's
``SwinTransformer`` (same parameters, same outputs given the same weights), so
a comparison differs only in the attention.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from itertools import product

import torch
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed, PatchMerging
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from mmengine.utils import to_2tuple
from torch import Tensor, nn

from ..attention import ATTENTIONS
from .utils import (
    TransformerBlock,
    build_stage_attention,
    check_stage_indices,
    freeze,
    init_transformer_weights,
    is_pretrained,
    load_pretrained,
    nlc_to_nchw,
    resolve_arch,
    stage_attn_cfgs,
)


class ShiftedWindowAttention(nn.Module):
    """Swin's (shifted) window softmax attention with relative position bias.

    The ``(H, W)`` grid is zero-padded at the bottom/right to multiples of the
    window size ``w``, cyclically shifted by ``s = w // 2`` if ``shift`` (the
    SW-MSA of every second block) and split into ``w x w`` windows. Per window
    and head, with ``q, k, v (w^2, d)``::

        Y = softmax(q k^T / sqrt(d) + B + M) v

    ``B[i, j]`` is read from a learnable ``((2w-1)^2, heads)`` table at the
    relative offset of tokens i and j; ``M[i, j] = -100`` (the official value)
    between tokens the shift brought together from different image regions,
    else 0. The result is shifted back and cropped to ``(H, W)``. As in the
    official and mmseg implementations, padded tokens are not masked.

    Parameters are named as in the official Swin (``qkv``, ``proj``,
    ``relative_position_bias_table``) and, except for the table, as in the
    global attentions, so a Swin checkpoint initialises every stage's
    projections whatever its attention.
    """

    def __init__(self, dim: int, num_heads: int, window_size: int = 7, shift: bool = False, qkv_bias: bool = True,
                 attn_drop: float = 0.0, proj_drop: float = 0.0) -> None:
        super().__init__()
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f'num_heads={num_heads} must be a positive divisor of dim={dim}')
        if window_size < 1 or (shift and window_size < 2):
            raise ValueError(f'window_size={window_size} must be >= 1 (>= 2 for shifted windows)')
        if not 0 <= attn_drop < 1:
            raise ValueError(f'attn_drop={attn_drop} must be in [0, 1)')
        self.num_heads, self.window_size = num_heads, window_size
        self.shift_size = window_size // 2 if shift else 0
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size), indexing='ij'))
        offsets = coords.flatten(1)[:, :, None] - coords.flatten(1)[:, None, :] + window_size - 1  # (2, w^2, w^2)
        self.register_buffer('relative_position_index', offsets[0] * (2 * window_size - 1) + offsets[1],
                             persistent=False)

    def shift_mask(self, hp: int, wp: int, device: torch.device) -> Tensor:
        """``M`` of every window of the padded ``(hp, wp)`` grid, ``(nW, w^2, w^2)``."""
        w, s = self.window_size, self.shift_size
        region = torch.zeros(hp, wp, device=device)
        cuts = (slice(0, -w), slice(-w, -s), slice(-s, None))
        for i, (rows, cols) in enumerate(product(cuts, cuts)):
            region[rows, cols] = i
        region = region.view(hp // w, w, wp // w, w).transpose(1, 2).reshape(-1, w * w)
        return (region[:, None, :] != region[:, :, None]).float() * -100.0

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        b, n, c = x.shape
        h, w = hw_shape
        if n != h * w:
            raise ValueError(f'N={n} tokens do not match hw_shape=({h}, {w})')
        ws, s = self.window_size, self.shift_size
        x = F.pad(x.view(b, h, w, c), (0, 0, 0, -w % ws, 0, -h % ws))
        hp, wp = x.shape[1:3]
        if s:
            x = torch.roll(x, (-s, -s), dims=(1, 2))
        windows = x.view(b, hp // ws, ws, wp // ws, ws, c).transpose(2, 3).reshape(b, hp // ws * (wp // ws), ws * ws, c)
        q, k, v = self.qkv(windows).unflatten(-1, (3, self.num_heads, -1)).permute(3, 0, 1, 4, 2, 5)
        mask = self.relative_position_bias_table[self.relative_position_index].permute(2, 0, 1)  # (heads, w^2, w^2)
        if s:
            mask = mask + self.shift_mask(hp, wp, x.device)[:, None]                           # (nW, heads, w^2, w^2)
        out = F.scaled_dot_product_attention(                                                  # (B, nW, heads, w^2, d)
            q, k, v, attn_mask=mask.to(q.dtype), dropout_p=self.attn_drop if self.training else 0.0)
        out = self.proj_drop(self.proj(out.transpose(2, 3).flatten(-2)))                      # (B, nW, w^2, C)
        x = out.view(b, hp // ws, wp // ws, ws, ws, c).transpose(2, 3).reshape(b, hp, wp, c)
        if s:
            x = torch.roll(x, (s, s), dims=(1, 2))
        return x[:, :h, :w].reshape(b, n, c)


class SwinStage(nn.Module):
    """Blocks at one resolution, then the patch merging into the next (if any)."""

    def __init__(self, blocks: Sequence[nn.Module], downsample: PatchMerging | None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        for block in self.blocks:
            x = block(x, hw_shape)
        return x


class LiSASwinTransformer(BaseModule):
    """Swin Transformer backbone whose attention is chosen per stage.

    Args:
        arch: 't'/'tiny', 's'/'small', 'b'/'base', or a dict with ``embed_dims``
            (int) and per-stage lists ``depths``, ``num_heads``.
        attn_cfgs: one ``dict(type=NAME, **kwargs)`` for all stages or one per
            stage. 'window': Swin's shifted-window softmax attention
            (:class:`ShiftedWindowAttention`, ``window_size`` from the dict or
            the backbone). 'softmax', 'linear', 'flatten', 'lisa': attention over
            the whole feature map; the backbone supplies dim, heads, ``qkv_bias``,
            ``proj_drop=drop_rate``, ``attn_drop=attn_drop_rate`` (softmax) and
            ``pos_shape`` (kernel attentions: the stage's grid at
            ``pretrain_img_size``); kwargs override them.
            Default: LiSA in stages 1-2, windows in stages 3-4 (the paper).
        window_size: window size of the 'window' stages.
        patch_norm: LayerNorm in the patch embedding and the patch mergings.
        out_indices: stages whose outputs are returned, each after its own
            LayerNorm ``norm{i}`` (strides 4, 8, 16, 32).
        drop_path_rate: stochastic depth, rising linearly over the blocks
            (Swin-T/S/B use 0.2/0.3/0.5 in ImageNet, 0.3 in UperNet, 0.2 in Mask R-CNN).
        frozen_stages: -1 freezes nothing, 0 the patch embedding, k also the
            stages 1..k (with their patch merging and output norm).
        with_cp: gradient checkpointing of every block.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=...)`` loads an
            mmpretrain classifier (``prefix='backbone.'``), an official Swin
            checkpoint or an mmseg/mmdet Swin backbone (keys converted by
            :func:`convert_swin_checkpoint`), with a report of the tensors loaded,
            newly initialised and unused; window tables of another size are resized.

    Inputs of any size: the patch embedding and the mergings pad the
    bottom/right edge (stage ``i`` has ``ceil(H / 2^(i+2))`` rows); window
    stages pad each map to a multiple of the window and crop back.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32])),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')
    attn_types = ('window', *ATTENTIONS)

    def __init__(
        self,
        arch: str | Mapping = 'tiny',
        attn_cfgs: Mapping | Sequence[Mapping] = (
            dict(type='lisa'), dict(type='lisa'), dict(type='window'), dict(type='window')),
        pretrain_img_size: int | Sequence[int] = 224,
        in_channels: int = 3,
        patch_size: int = 4,
        window_size: int = 7,
        mlp_ratio: float = 4.0,
        out_indices: Sequence[int] = (0, 1, 2, 3),
        qkv_bias: bool = True,
        patch_norm: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        act_cfg: dict = dict(type='GELU'),
        norm_cfg: dict = dict(type='LN'),
        frozen_stages: int = -1,
        with_cp: bool = False,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(init_cfg=init_cfg)
        settings = resolve_arch(arch, self.arch_zoo, self.arch_keys)
        depths, num_heads = settings['depths'], settings['num_heads']
        if len(depths) != len(num_heads) or not depths:
            raise ValueError(f'arch depths={depths} and num_heads={num_heads} need one entry per stage')
        num_stages = len(depths)
        self.out_indices = check_stage_indices(out_indices, frozen_stages, num_stages)
        self.frozen_stages = frozen_stages
        attn_cfgs = stage_attn_cfgs(attn_cfgs, num_stages, self.attn_types)
        self.num_features = [settings['embed_dims'] * 2 ** i for i in range(num_stages)]
        patch_norm_cfg = norm_cfg if patch_norm else None

        self.patch_embed = PatchEmbed(in_channels, self.num_features[0], kernel_size=patch_size, stride=patch_size,
                                      padding='corner', norm_cfg=patch_norm_cfg)
        self.drop_after_pos = nn.Dropout(drop_rate)
        grid = [math.ceil(s / patch_size) for s in to_2tuple(pretrain_img_size)]
        dpr = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.stages = nn.ModuleList()
        for i, (dim, depth, heads) in enumerate(zip(self.num_features, depths, num_heads)):
            blocks = []
            for j in range(depth):
                cfg = attn_cfgs[i]
                if cfg['type'] == 'window':
                    window_kwargs = dict(window_size=window_size, qkv_bias=qkv_bias, attn_drop=attn_drop_rate,
                                         proj_drop=drop_rate)
                    window_kwargs.update((k, v) for k, v in cfg.items() if k != 'type')
                    attn = ShiftedWindowAttention(dim, heads, shift=j % 2 == 1, **window_kwargs)
                else:
                    attn = build_stage_attention(cfg, dim, heads, stage=i, qkv_bias=qkv_bias,
                                                 attn_drop=attn_drop_rate, proj_drop=drop_rate, pos_shape=grid)
                blocks.append(TransformerBlock(dim, attn, mlp_ratio, drop_rate, dpr[sum(depths[:i]) + j],
                                               act_cfg, norm_cfg, with_cp))
            downsample = (PatchMerging(dim, 2 * dim, stride=2, norm_cfg=patch_norm_cfg)
                          if i < num_stages - 1 else None)
            self.stages.append(SwinStage(blocks, downsample))
            grid = [math.ceil(s / 2) for s in grid]
        for i in self.out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg, self.num_features[i])[1])
        self._freeze_stages()

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x, hw_shape = self.patch_embed(x)
        x = self.drop_after_pos(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x, hw_shape)
            if i in self.out_indices:
                outs.append(nlc_to_nchw(getattr(self, f'norm{i}')(x), hw_shape))
            if stage.downsample is not None:
                x, hw_shape = stage.downsample(x, hw_shape)
        return tuple(outs)

    def _freeze_stages(self) -> None:
        if self.frozen_stages >= 0:
            freeze(self.patch_embed, self.drop_after_pos)
        for i in range(self.frozen_stages):
            freeze(self.stages[i])
            if i in self.out_indices:
                freeze(getattr(self, f'norm{i}'))

    def train(self, mode: bool = True) -> LiSASwinTransformer:
        super().train(mode)
        self._freeze_stages()
        return self

    def init_weights(self) -> None:
        init_transformer_weights(self, conv_fan_out=False)
        for m in self.modules():
            if isinstance(m, ShiftedWindowAttention):
                trunc_normal_(m.relative_position_bias_table, std=0.02)
        if is_pretrained(self.init_cfg):
            load_pretrained(self, self.init_cfg['checkpoint'], self.init_cfg.get('prefix'), convert_swin_checkpoint)
        elif self.init_cfg is not None:
            super().init_weights()


def _unfold_order(x: Tensor) -> Tensor:
    """Reorder the last axis (4C) of the official patch merging to ``nn.Unfold``'s.

    Official: ``[x(0::2, 0::2), x(1::2, 0::2), x(0::2, 1::2), x(1::2, 1::2)]``
    concatenated, index ``k C + c``; unfold (mmcv): index ``4 c + u`` with
    ``u = 2 dy + dx``, i.e. ``k = (0, 2, 1, 3)[u]``.
    """
    *lead, four_c = x.shape
    return x.reshape(*lead, 4, four_c // 4)[..., [0, 2, 1, 3], :].transpose(-1, -2).reshape(*lead, four_c)


def convert_swin_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename a Swin checkpoint to LiSASwinTransformer keys.

    Official (github.com/microsoft/Swin-Transformer), ``i`` the stage::

        patch_embed.proj.*             -> patch_embed.projection.*
        layers.{i}.blocks.{j}.mlp.fc1.* / fc2.*  -> stages.{i}.blocks.{j}.ffn.layers.0.0.* / ffn.layers.1.*
        layers.{i}.blocks.{j}.<rest>   -> stages.{i}.blocks.{j}.<rest>  (norm1, norm2, attn.qkv/proj/table)
        layers.{i}.downsample.*        -> stages.{i}.downsample.*  (4C axis reordered for nn.Unfold)
        norm.*                         -> norm{last}.*  (the last stage's output norm)

    mmseg/mmdet Swin backbones: ``attn.w_msa.*`` -> ``attn.*``. Always dropped:
    ``head.*`` (classification), the buffers ``relative_position_index`` and
    ``attn_mask`` (rebuilt by the model). Other state dicts pass unchanged.
    """
    official = any(re.match(r'layers\.\d+\.blocks\.', k) for k in state_dict)
    last = max((int(k.split('.')[1]) for k in state_dict if k.startswith('layers.')), default=0)
    out = {}
    for key, value in state_dict.items():
        if key.startswith('head.') or key.endswith(('relative_position_index', 'attn_mask')):
            continue
        key = key.replace('.attn.w_msa.', '.attn.')
        if official:
            if key.startswith('patch_embed.proj.'):
                key = 'patch_embed.projection.' + key[len('patch_embed.proj.'):]
            elif key.startswith('layers.'):
                key = 'stages.' + key[len('layers.'):]
                key = key.replace('.mlp.fc1.', '.ffn.layers.0.0.').replace('.mlp.fc2.', '.ffn.layers.1.')
                if '.downsample.' in key:
                    value = _unfold_order(value)
            elif key.startswith('norm.'):
                key = f'norm{last}.' + key[len('norm.'):]
        out[key] = value
    return out
