"""Swin Transformer with a selectable attention per stage.

Swin Transformer (Liu et al., ICCV 2021, https://arxiv.org/abs/2103.14030).
The default, LiSA over the whole feature map in stages 1-2 with its positional
encoding learnt at the 224-px grid and resized to other inputs, and Swin's
shifted 7x7 window softmax attention in stages 3-4, is FLatten-Swin's placement
of its linear attention (Han et al., ICCV 2023), which the LiSA paper takes over
from the baseline it compares with. With ``'window'`` in every stage the model is mmseg's
``SwinTransformer`` (same parameters, same outputs given the same weights), so
a comparison differs only in the attention.

It also takes the arguments of mmseg's, mmdet's and mmpretrain's ``SwinTransformer``
(:func:`.upstream.from_upstream_swin`): a config of one of them with only its ``type`` changed
builds that model (shifted-window attention in every stage).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed, PatchMerging
from torch import Tensor, nn

from .base import LiSABackbone
from .blocks import build_blocks, stage_drop_path_rates
from .checks import each, to_pair
from .grid import nlc_to_nchw, resize_grid_tokens
from .upstream import accepts_upstream_args, from_upstream_swin


def _per_stage(cfgs: Mapping | Sequence[Mapping], num: int, name: str, unit: str, keys: Sequence[str]) -> list[dict]:
    """:func:`.checks.each`, each dict with only ``keys``."""
    cfgs = each(cfgs, num, name, unit)
    for i, cfg in enumerate(cfgs):
        if unknown := sorted(set(cfg) - set(keys)):
            raise ValueError(f'{name}[{i}] has {", ".join(unknown)}; it may set {", ".join(keys)}')
    return [dict(cfg) for cfg in cfgs]


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


class LiSASwinTransformer(LiSABackbone):
    """Swin Transformer backbone whose attention is chosen per stage.

    Args:
        arch: 't'/'tiny', 's'/'small', 'b'/'base', 'l'/'large', or a dict with ``embed_dims``
            (int) and per-stage lists ``depths``, ``num_heads``.
        attn_cfgs: one ``dict(type=NAME, **kwargs)`` for all stages or one per
            stage, NAME a registered attention: 'window' (Swin's shifted-window
            softmax, ``window_size`` 7 unless given, shifted in odd blocks),
            'softmax', 'linear', 'flatten', 'lisa' (over the whole feature map), ...
            Every type gets the context of ``..attention.CONTEXT``: dim, heads,
            ``qkv_bias``, ``attn_drop=attn_drop_rate``, ``proj_drop=drop_rate``,
            ``pos_shape`` (the stage's grid at ``pretrain_img_size``),
            ``num_prefix_tokens=0``, ``block_index``; kwargs override them.
            Default: LiSA in stages 1-2, 7x7 windows in stages 3-4 (FLatten-Swin's
            placement, see above).
        pretrain_img_size: input size (int or (H, W)) of the pretraining; sets the
            grids of the global attentions' positional encodings.
        patch_norm: LayerNorm in the patch embedding and the patch mergings.
        use_abs_pos_embed: add a learnt ``absolute_pos_embed`` (the patch grid of
            ``pretrain_img_size``, resized bicubically to other grids) after the patch embedding.
        out_indices: stages whose outputs are returned, each after its own
            LayerNorm ``norm{i}`` (strides 4, 8, 16, 32).
        drop_path_rate: stochastic depth, rising linearly over the blocks
            (Swin-T/S/B use 0.2/0.3/0.5 in ImageNet, 0.3 in UperNet, 0.2 in Mask R-CNN).
        frozen_stages: -1 freezes nothing, 0 the patch embedding, k also the
            stages 1..k (with their patch merging and output norm), as mmseg's and mmdet's
            ``SwinTransformer`` (0 also the absolute position embedding). With mmpretrain's
            arguments its numbers mean what they mean there (:func:`.upstream.from_upstream_swin`): k
            freezes the patch embedding and stages 0..k.
        with_cp: gradient checkpointing of every block.
        norm_cfg: every norm: the patch embedding's and the mergings' (with ``patch_norm``), the
            blocks', the outputs'; unless one of the next three sets it.
        out_norm_cfg: the output norms ``norm{i}`` (None: ``norm_cfg``); mmpretrain's ``norm_cfg``.
        block_cfgs: one dict for all stages or one per stage, the blocks' ``norm_cfg``, ``with_cp``
            ``drop_path_rates`` (one per block, instead of ``drop_path_rate``'s schedule) and ``ffn_cfg``
            (arguments of mmcv's ``FFN`` overriding ``feedforward_channels=mlp_ratio * dim``,
            ``act_cfg``, ``ffn_drop=drop_rate``, the drop path, e.g. ``num_fcs``, ``add_identity``).
        downsample_cfgs: one dict for all patch mergings or one per merging (one fewer than the
            stages), their ``norm_cfg`` and ``bias`` (mmcv's ``PatchMerging``).
        upstream: whose ``SwinTransformer`` the arguments are those of: None (this class's own),
            'mmseg', 'mmdet' or 'mmpretrain'; set by :func:`.upstream.from_upstream_swin`. Parts of the
            freezing follow it: mmpretrain leaves the output norms of frozen stages in
            training mode (their parameters frozen) and the absolute position embedding trainable.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=..., allow_new=...)``
            (:class:`.base.LiSABackbone`): an official Swin, an mmseg/mmdet/mmpretrain
            ``SwinTransformer`` or a LiSASwinTransformer checkpoint (e.g. of an
            mmpretrain classifier, ``prefix='backbone.'``); keys converted by
            :func:`convert_swin_checkpoint`, here and in every ``load_state_dict``;
            window tables of another size are resized.

    Inputs of any size: the patch embedding and the mergings pad the
    bottom/right edge (stage ``i`` has ``ceil(H / 2^(i+2))`` rows); window
    stages pad each map to a multiple of the window and crop back.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=96, depths=[2, 2, 18, 2], num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=128, depths=[2, 2, 18, 2], num_heads=[4, 8, 16, 32])),
        **dict.fromkeys(['l', 'large'], dict(embed_dims=192, depths=[2, 2, 18, 2], num_heads=[6, 12, 24, 48])),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')
    stage_keys = ('depths', 'num_heads')
    UPSTREAMS = (None, 'mmseg', 'mmdet', 'mmpretrain')
    embeddings = ('absolute_pos_embed',)

    @accepts_upstream_args(from_upstream_swin)
    def __init__(
        self,
        arch: str | Mapping = 'tiny',
        attn_cfgs: Mapping | Sequence[Mapping] = (
            dict(type='lisa'), dict(type='lisa'), dict(type='window'), dict(type='window')),
        pretrain_img_size: int | Sequence[int] = 224,
        in_channels: int = 3,
        patch_size: int = 4,
        mlp_ratio: float = 4.0,
        out_indices: int | Sequence[int] = (0, 1, 2, 3),
        qkv_bias: bool = True,
        patch_norm: bool = True,
        use_abs_pos_embed: bool = False,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        act_cfg: dict = dict(type='GELU'),
        norm_cfg: dict = dict(type='LN'),
        out_norm_cfg: dict | None = None,
        block_cfgs: Mapping | Sequence[Mapping] = dict(),
        downsample_cfgs: Mapping | Sequence[Mapping] = dict(),
        frozen_stages: int = -1,
        with_cp: bool = False,
        upstream: str | None = None,
        init_cfg: dict | None = None,
    ) -> None:
        patch_norm_cfg = norm_cfg if patch_norm else None  # the patch embedding's and the mergings'
        super().__init__(arch, init_cfg, upstream)
        depths, num_heads = self.arch_settings['depths'], self.arch_settings['num_heads']
        num_stages = self.num_stages
        attn_cfgs = self.check_stage_args(num_stages, out_indices, frozen_stages, attn_cfgs)
        self.num_features = [self.arch_settings['embed_dims'] * 2 ** i for i in range(num_stages)]
        block_cfgs = _per_stage(block_cfgs, num_stages, 'block_cfgs', 'stage',
                                ('norm_cfg', 'ffn_cfg', 'with_cp', 'drop_path_rates'))
        downsample_cfgs = _per_stage(downsample_cfgs, num_stages - 1, 'downsample_cfgs', 'patch merging',
                                     ('norm_cfg', 'bias'))

        self.patch_embed = PatchEmbed(in_channels, self.num_features[0], kernel_size=patch_size, stride=patch_size,
                                      padding='corner', norm_cfg=patch_norm_cfg)
        grid = [math.ceil(s / patch_size) for s in to_pair(pretrain_img_size, 'pretrain_img_size')]
        self.use_abs_pos_embed = use_abs_pos_embed
        if use_abs_pos_embed:  # pos_shape: the table's grid, by which loading resizes it (.loading)
            self.pos_shape = tuple(grid)
            self.absolute_pos_embed = nn.Parameter(torch.zeros(1, math.prod(grid), self.num_features[0]))
        self.drop_after_pos = nn.Dropout(drop_rate)
        self.stages = nn.ModuleList()
        for i, (dim, depth, heads, rates) in enumerate(
                zip(self.num_features, depths, num_heads, stage_drop_path_rates(drop_path_rate, depths))):
            rates = block_cfgs[i].pop('drop_path_rates', rates)
            if len(rates) != depth:
                raise ValueError(f'block_cfgs[{i}].drop_path_rates={rates!r} needs one rate per block ({depth})')
            blocks = build_blocks([attn_cfgs[i]] * depth, dim, heads, int(mlp_ratio * dim), rates, f'stage {i}, ',
                                  qkv_bias=qkv_bias, attn_drop=attn_drop_rate, drop_rate=drop_rate, pos_shape=grid,
                                  act_cfg=act_cfg, **{'norm_cfg': norm_cfg, 'with_cp': with_cp, **block_cfgs[i]})
            downsample = (PatchMerging(dim, 2 * dim, stride=2, **{'norm_cfg': patch_norm_cfg, **downsample_cfgs[i]})
                          if i < num_stages - 1 else None)
            self.stages.append(SwinStage(blocks, downsample))
            grid = [math.ceil(s / 2) for s in grid]
        for i in self.out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg if out_norm_cfg is None else out_norm_cfg,
                                                         self.num_features[i])[1])
        self._freeze_stages()

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x, hw_shape = self.patch_embed(x)
        if self.use_abs_pos_embed:
            x = x + resize_grid_tokens(self.absolute_pos_embed, self.pos_shape, hw_shape, 'bicubic')
        x = self.drop_after_pos(x)
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x, hw_shape)
            if i in self.out_indices:
                outs.append(nlc_to_nchw(getattr(self, f'norm{i}')(x), hw_shape))
            if stage.downsample is not None:
                x, hw_shape = stage.downsample(x, hw_shape)
        return tuple(outs)

    def frozen_parts(self) -> list[nn.Module]:
        if self.frozen_stages < 0:
            return []
        k = self.frozen_stages
        norms = [getattr(self, f'norm{i}') for i in self.out_indices if i < k]
        if self.upstream == 'mmpretrain':  # it stops their gradients but leaves them in training mode
            norms = [p for norm in norms for p in norm.parameters()]
        table = [] if self.upstream == 'mmpretrain' else [getattr(self, 'absolute_pos_embed', None)]
        return [self.patch_embed, self.drop_after_pos, *table, *self.stages[:k], *norms]

    @staticmethod
    def convert_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return convert_swin_checkpoint(state_dict)


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

    mmseg/mmdet/mmpretrain ``SwinTransformer``: ``attn.w_msa.*`` -> ``attn.*``. Always dropped:
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
