"""PVT v1 with a selectable attention per stage.

Pyramid Vision Transformer (Wang et al., ICCV 2021, https://arxiv.org/abs/2102.12122).
The default, LiSA in all four stages without spatial reduction (sr_ratio 1), is
FLatten-PVT's placement of its linear attention (Han et al., ICCV 2023), which the
LiSA paper takes over from the baseline it compares with; the paper states no
placement of its own. With
``attn_cfgs=[dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)]`` the model
is mmdet's ``PyramidVisionTransformer`` (same parameters, same outputs given
the same weights), so a comparison differs only in the attention.

It also takes mmdet's arguments (:func:`.upstream.from_mmdet_pvt`): a config of mmdet's
``PyramidVisionTransformer`` with only its ``type`` changed builds that model,
softmax attention with its ``sr_ratios`` and its flooring patch embeddings included.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import torch
from mmcv.cnn.bricks.transformer import PatchEmbed
from torch import Tensor, nn

from .base import LiSABackbone
from .blocks import build_blocks, stage_drop_path_rates
from .checks import to_pair
from .grid import nlc_to_nchw, resize_grid_tokens
from .upstream import accepts_upstream_args, from_mmdet_pvt


class PVTStage(nn.Module):
    """Patch embedding (stride = patch size), absolute position embedding, blocks.

    The position embedding is learnt on the ``pos_shape`` grid of the
    pretraining size and resized bilinearly to other grids (as PVT and mmdet do).
    """

    def __init__(self, patch_embed: PatchEmbed, pos_shape: Sequence[int], blocks: Sequence[nn.Module],
                 drop_rate: float = 0.0) -> None:
        super().__init__()
        self.patch_embed = patch_embed
        self.pos_shape = tuple(pos_shape)
        self.pos_embed = nn.Parameter(torch.zeros(1, math.prod(self.pos_shape), patch_embed.embed_dims))
        self.pos_drop = nn.Dropout(drop_rate)
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C_in, H, W) -> (B, C, H', W')``, ``H' = ceil(H / p)`` ('corner') or
        ``floor((H + 2 pad) / p)``."""
        x, hw_shape = self.patch_embed(x)
        x = self.pos_drop(x + resize_grid_tokens(self.pos_embed, self.pos_shape, hw_shape, 'bilinear'))
        for block in self.blocks:
            x = block(x, hw_shape)
        return nlc_to_nchw(x, hw_shape)


class LiSAPVT(LiSABackbone):
    """PVT v1 backbone whose attention is chosen per stage.

    Args:
        arch: 't'/'tiny', 's'/'small', 'm'/'medium', 'l'/'large', or a dict
            with per-stage lists ``embed_dims``, ``depths``, ``num_heads``, ``mlp_ratios``.
        attn_cfgs: one ``dict(type=NAME, **kwargs)`` for all stages or one per
            stage, NAME a registered attention ('softmax': PVT's spatial-reduction
            attention with ``sr_ratio``; 'linear', 'flatten', 'lisa', 'window', ...).
            Every type gets the context of ``..attention.CONTEXT``: dim, heads,
            ``qkv_bias``, ``attn_drop=attn_drop_rate``, ``proj_drop=drop_rate``,
            ``pos_shape`` (the stage's grid at ``pretrain_img_size``),
            ``num_prefix_tokens=0``, ``block_index``; kwargs override them.
            Default: LiSA in every stage (FLatten-PVT's placement, see above).
        pretrain_img_size: input size (int or (H, W)) of the pretraining; sets the
            grids of the position tables (other sizes are resized).
        patch_sizes: patch size (= stride) of each stage's patch embedding.
        paddings: 'corner' (pad the bottom/right edge to a multiple of the patch: stage
            ``i`` has ``ceil(H / 2^(i+2))`` rows, no pixel dropped) or one padding (int)
            per stage on every side, as mmdet's (0: ``floor``, the remainder dropped).
        out_indices: stages whose outputs are returned (strides 4, 8, 16, 32).
        drop_path_rate: stochastic depth, rising linearly over the blocks.
        frozen_stages: -1 freezes nothing, 0 the first patch embedding and its
            position embedding, k the whole stages 1..k.
        with_cp: gradient checkpointing of every block.
        upstream: None (this class's own arguments) or 'mmdet' (those of its
            ``PyramidVisionTransformer``, defaults included; set by :func:`.upstream.from_mmdet_pvt` when
            the call names one of them).
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=..., allow_new=...)``
            (:class:`.base.LiSABackbone`): an official PVT v1, an mmdet
            ``PyramidVisionTransformer`` or a LiSAPVT checkpoint (e.g. of an
            mmpretrain classifier, ``prefix='backbone.'``); keys converted by
            :func:`convert_pvt_checkpoint`, here and in every ``load_state_dict``.

    Inputs of any size. With this project's arguments each patch embedding pads the
    bottom/right edge (``paddings='corner'``), so no input pixel is dropped; with mmdet's
    (:func:`.upstream.from_mmdet_pvt`) the patch embeddings floor as mmdet's (``paddings=0``),
    so its checkpoints give its output shapes on any input. The outputs carry no final
    norm, as in PVT v1.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=[64, 128, 320, 512], depths=[2, 2, 2, 2],
                                            num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=[64, 128, 320, 512], depths=[3, 4, 6, 3],
                                             num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])),
        **dict.fromkeys(['m', 'medium'], dict(embed_dims=[64, 128, 320, 512], depths=[3, 4, 18, 3],
                                              num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])),
        **dict.fromkeys(['l', 'large'], dict(embed_dims=[64, 128, 320, 512], depths=[3, 8, 27, 3],
                                             num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4])),
    }
    arch_keys = stage_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')
    embeddings = ('stages.*.pos_embed',)
    conv_fan_out = True
    UPSTREAMS = (None, 'mmdet')

    @accepts_upstream_args(from_mmdet_pvt)
    def __init__(
        self,
        arch: str | Mapping = 'tiny',
        attn_cfgs: Mapping | Sequence[Mapping] = dict(type='lisa'),
        pretrain_img_size: int | Sequence[int] = 224,
        in_channels: int = 3,
        patch_sizes: Sequence[int] = (4, 2, 2, 2),
        paddings: str | Sequence[int] = 'corner',
        out_indices: int | Sequence[int] = (0, 1, 2, 3),
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        act_cfg: dict = dict(type='GELU'),
        norm_cfg: dict = dict(type='LN', eps=1e-6),
        frozen_stages: int = -1,
        with_cp: bool = False,
        upstream: str | None = None,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(arch, init_cfg, upstream)
        settings, num_stages = self.arch_settings, self.num_stages
        if len(patch_sizes) != num_stages:
            raise ValueError(f'patch_sizes={tuple(patch_sizes)} needs one entry per stage ({num_stages})')
        if paddings == 'corner':
            paddings = ['corner'] * num_stages
        elif (isinstance(paddings, str) or len(paddings) != num_stages
              or not all(isinstance(p, int) and p >= 0 for p in paddings)):
            raise ValueError(f"paddings={paddings!r} must be 'corner' or one int >= 0 per stage ({num_stages})")
        attn_cfgs = self.check_stage_args(num_stages, out_indices, frozen_stages, attn_cfgs)
        grid = to_pair(pretrain_img_size, 'pretrain_img_size')
        depths = settings['depths']
        self.stages = nn.ModuleList()
        for i, (dim, depth, heads, mlp_ratio, patch, pad, rates) in enumerate(zip(
                *(settings[k] for k in self.arch_keys), patch_sizes, paddings,
                stage_drop_path_rates(drop_path_rate, depths))):
            pos_shape = grid = tuple(math.ceil(g / patch) if pad == 'corner' else (g + 2 * pad - patch) // patch + 1
                                     for g in grid)
            blocks = build_blocks([attn_cfgs[i]] * depth, dim, heads, int(mlp_ratio * dim), rates, f'stage {i}, ',
                                  qkv_bias=qkv_bias, attn_drop=attn_drop_rate, drop_rate=drop_rate,
                                  pos_shape=pos_shape, act_cfg=act_cfg, norm_cfg=norm_cfg, with_cp=with_cp)
            patch_embed = PatchEmbed(in_channels, dim, kernel_size=patch, stride=patch, padding=pad,
                                     norm_cfg=norm_cfg)
            self.stages.append(PVTStage(patch_embed, pos_shape, blocks, drop_rate))
            in_channels = dim
        self._freeze_stages()

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)

    def frozen_parts(self) -> list[nn.Module | nn.Parameter]:
        if self.frozen_stages < 0:
            return []
        return [self.stages[0].patch_embed, self.stages[0].pos_embed, *self.stages[:self.frozen_stages]]

    @staticmethod
    def convert_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return convert_pvt_checkpoint(state_dict)


def convert_pvt_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename an official PVT v1 (github.com/whai362/PVT) or an mmdet
    ``PyramidVisionTransformer`` checkpoint to LiSAPVT keys; LiSAPVT's own pass unchanged.

    Official, with ``s`` the 1-based stage and ``j`` the block::

        patch_embed{s}.proj.* / .norm.*   -> stages.{s-1}.patch_embed.projection.* / .norm.*
        pos_embed{s}                      -> stages.{s-1}.pos_embed  (last stage: class-token row dropped)
        block{s}.{j}.attn.q.* + attn.kv.* -> stages.{s-1}.blocks.{j}.attn.qkv.*  (rows [q; k; v])
        block{s}.{j}.mlp.fc1.* / fc2.*    -> stages.{s-1}.blocks.{j}.ffn.layers.0.0.* / ffn.layers.1.*
        block{s}.{j}.<rest>               -> stages.{s-1}.blocks.{j}.<rest>  (norm1, norm2, attn.proj/sr/norm)
        cls_token, norm.*, head.*         -> dropped (classification only)

    mmdet, with ``i`` the 0-based stage (its 1x1-conv FFN weights flattened)::

        layers.{i}.0.*                    -> stages.{i}.patch_embed.*
        layers.{i}.1.0.pos_embed          -> stages.{i}.pos_embed
        layers.{i}.1.{j+1}.<rest>         -> stages.{i}.blocks.{j}.<rest>, with attn.attn.in_proj_* -> attn.qkv.*,
                                             attn.attn.out_proj.* -> attn.proj.*, ffn.layers.0/3.* -> 0.0/1.*
    """
    if any(re.fullmatch(r'layers\.\d+\.1\.0\.pos_embed', k) for k in state_dict):
        return dict(_from_mmdet_pvt(k, v) for k, v in state_dict.items())
    if not any(k.startswith('patch_embed1.') for k in state_dict):
        return dict(state_dict)
    pos_stages = [int(k[len('pos_embed'):]) for k in state_dict if re.fullmatch(r'pos_embed\d+', k)]
    cls_stage = max(pos_stages) if 'cls_token' in state_dict else None
    out = {}
    for key, value in state_dict.items():
        if key == 'cls_token' or key.startswith(('norm.', 'head.')) or re.search(r'\.attn\.kv\.', key):
            continue
        if m := re.fullmatch(r'pos_embed(\d+)', key):
            s = int(m[1])
            out[f'stages.{s - 1}.pos_embed'] = value[:, 1:] if s == cls_stage else value
        elif m := re.fullmatch(r'patch_embed(\d+)\.(proj|norm)\.(\w+)', key):
            out[f'stages.{int(m[1]) - 1}.patch_embed.{"projection" if m[2] == "proj" else "norm"}.{m[3]}'] = value
        elif m := re.fullmatch(r'block(\d+)\.(\d+)\.(.+)', key):
            rest = m[3]
            if rest.startswith('attn.q.'):
                value = torch.cat([value, state_dict[key.replace('.attn.q.', '.attn.kv.')]])
                rest = 'attn.qkv.' + rest[len('attn.q.'):]
            rest = rest.replace('mlp.fc1.', 'ffn.layers.0.0.').replace('mlp.fc2.', 'ffn.layers.1.')
            out[f'stages.{int(m[1]) - 1}.blocks.{m[2]}.{rest}'] = value
        else:
            out[key] = value  # reported as unused
    return out


def _from_mmdet_pvt(key: str, value: Tensor) -> tuple[str, Tensor]:
    if m := re.fullmatch(r'layers\.(\d+)\.0\.(.+)', key):
        return f'stages.{m[1]}.patch_embed.{m[2]}', value
    if m := re.fullmatch(r'layers\.(\d+)\.1\.0\.pos_embed', key):
        return f'stages.{m[1]}.pos_embed', value
    if m := re.fullmatch(r'layers\.(\d+)\.1\.(\d+)\.(.+)', key):
        rest = m[3].replace('attn.attn.in_proj_', 'attn.qkv.').replace('attn.attn.out_proj.', 'attn.proj.')
        if rest.startswith('ffn.'):
            rest = rest.replace('ffn.layers.0.', 'ffn.layers.0.0.').replace('ffn.layers.3.', 'ffn.layers.1.')
            value = value.flatten(1) if value.dim() == 4 else value
        return f'stages.{m[1]}.blocks.{int(m[2]) - 1}.{rest}', value
    return key, value  # reported as unused
