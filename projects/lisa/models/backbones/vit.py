"""DeiT / plain ViT with a selectable attention (LiSA, FLatten, linear, softmax).

DeiT: Touvron et al., "Training data-efficient image transformers & distillation
through attention", ICML 2021; ViT: Dosovitskiy et al., ICLR 2021. LiSA's DeiT
rows (Table 1, Tables 5-8 of arXiv 2611.04216) swap the attention of every
layer and keep the rest of DeiT as it is.

With ``attn_cfgs=dict(type='softmax')`` :class:`LiSAViT` is mmpretrain's ``VisionTransformer``
and :class:`LiSADistilledViT` its ``DistilledVisionTransformer`` (DeiT's distillation token)
layer for layer: the same state dict, key for key, and the same outputs. Both take mmpretrain's
arguments (:func:`.upstream.from_mmpretrain_vit`): a config of those classes with only the ``type`` changed
builds that model. Official DeiT, mmseg and older LiSAViT checkpoints are renamed when loaded
(:func:`convert_vit_checkpoint`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed
from torch import Tensor, nn

from ..attention.layers import position_table_at
from .base import LiSABackbone
from .blocks import TransformerBlock, build_blocks
from .checks import to_pair
from .grid import nlc_to_nchw
from .upstream import accepts_upstream_args, from_mmpretrain_vit


class ViTLayer(TransformerBlock):
    """:class:`.blocks.TransformerBlock` under the names of mmpretrain's ``TransformerEncoderLayer``:
    the norms are the modules ``ln1`` / ``ln2``, read as ``norm1`` / ``norm2`` (as there)."""

    norm_names = ('ln1', 'ln2')

    @property
    def norm1(self) -> nn.Module:
        return self.ln1

    @property
    def norm2(self) -> nn.Module:
        return self.ln2


class LiSAViT(LiSABackbone):
    """DeiT / ViT whose layers use the attentions built from ``attn_cfgs``.

    Tokens ``[cls; p_1 .. p_HW]`` (the class token first, the patches
    row-major on the ``(H, W)`` patch grid) go through every layer together.
    The attention sees the class token as a prefix token
    (``num_prefix_tokens=1``): the random walk of LiSA and the kernel
    normalisation run over all ``1 + HW`` tokens, while the 3x3 local branch,
    the depthwise conv and the learnable positional encoding on ``k`` act on
    the patch grid only (:mod:`..attention`).

    The state dict is mmpretrain's ``VisionTransformer``'s: ``cls_token``, ``pos_embed``
    ``(1, 1 + H0 * W0, C)``, ``patch_embed.projection``, ``layers.{i}.ln1`` / ``attn.qkv`` /
    ``attn.proj`` / ``ln2`` / ``ffn.layers.0.0`` / ``ffn.layers.1``, ``ln1`` (final norm), ``ln2``
    (``avg_featmap``), plus the tensors of attentions other than softmax.

    Choices where the papers are silent:

    * the position tables (``pos_embed``, the kernel attentions' positional
      encodings) are learnt on the patch grid of ``pretrain_img_size``; for another
      input size they are resized bicubically (in the forward pass, and when a
      checkpoint of another grid is loaded, as mmpretrain does);
    * ``frozen_stages=0`` freezes the embeddings (patch embedding, class
      token, ``pos_embed``), ``k`` also layers ``1..k``, ``num_layers`` also the
      final norms; frozen parts stay in eval mode (mmdet's convention).

    Args:
        arch: 'deit-tiny' / 'deit-t' / 'tiny' / 't' (embed 192, 3 heads),
            'deit-small' (384, 6), 'deit-base' (768, 12), each 12 layers with
            MLP ratio 4; or a dict with exactly ``embed_dims``, ``num_layers``,
            ``num_heads``, ``feedforward_channels``.
        attn_cfgs: one ``dict(type=NAME, **kwargs)`` for all layers or one per
            layer, NAME a registered attention. Every type gets the context of
            ``..attention.CONTEXT``: dim, heads, ``qkv_bias``,
            ``attn_drop=attn_drop_rate``, ``proj_drop=drop_rate``, ``pos_shape``
            (the patch grid), ``num_prefix_tokens``, ``block_index`` (the layer);
            kwargs override them. Default: LiSA in every layer (the paper's DeiT rows).
        patch_size: patch (and stride) size of the patch embedding.
        pretrain_img_size: input size (int or (H, W)) whose patch grid the position
            tables are stored for; other sizes work.
        out_indices: layers whose output is returned (negative from the end).
        drop_rate: dropout after the position embedding, the attention
            projection and in the MLP.
        attn_drop_rate: dropout on attention probabilities (softmax attentions).
        drop_path_rate: stochastic depth, linearly increasing over layers.
        with_cls_token: prepend a class token.
        out_type: 'cls_token' (B, C; :class:`LiSADistilledViT`: the pair of class and
            distillation tokens), 'featmap' (B, C, H, W), 'avg_featmap' (B, C: mean of the
            patch tokens, then LayerNorm ``ln2``) or 'raw' (B, N, C), per out index, as
            mmpretrain's ``VisionTransformer``.
        final_norm: LayerNorm ``ln1`` after the last layer.
        with_cp: gradient checkpointing of every layer.
        frozen_stages: -1 (none) .. num_layers, see above; with mmpretrain's arguments
            (:func:`.upstream.from_mmpretrain_vit`) 0 freezes nothing, as there.
        upstream: None (this class's own arguments) or 'mmpretrain' (those of its
            ``VisionTransformer``, defaults included); set by :func:`.upstream.from_mmpretrain_vit` when
            the call names one of them.
        init_cfg: None for DeiT's initialisation (truncated normal 0.02 for linear
            layers, ``pos_embed`` and the class token, zero bias, LayerNorm 1/0), or
            ``dict(type='Pretrained', checkpoint=..., prefix=..., allow_new=...)``
            (:class:`.base.LiSABackbone`): an mmpretrain or mmseg
            ``VisionTransformer``, an official DeiT or a LiSAViT checkpoint.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny', 'deit-t', 'deit-tiny'], {
            'embed_dims': 192, 'num_layers': 12, 'num_heads': 3, 'feedforward_channels': 192 * 4}),
        **dict.fromkeys(['s', 'small', 'deit-s', 'deit-small'], {
            'embed_dims': 384, 'num_layers': 12, 'num_heads': 6, 'feedforward_channels': 384 * 4}),
        **dict.fromkeys(['b', 'base', 'deit-b', 'deit-base'], {
            'embed_dims': 768, 'num_layers': 12, 'num_heads': 12, 'feedforward_channels': 768 * 4}),
    }
    arch_keys = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
    embeddings = ('pos_embed', 'cls_token', 'dist_token')
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')
    UPSTREAMS = (None, 'mmpretrain')
    distilled: ClassVar[bool] = False  # a distillation token after the class token (LiSADistilledViT)

    @accepts_upstream_args(from_mmpretrain_vit)
    def __init__(
        self,
        arch: str | Mapping = 'deit-tiny',
        attn_cfgs: Mapping | Sequence[Mapping] = dict(type='lisa'),
        patch_size: int = 16,
        pretrain_img_size: int | Sequence[int] = 224,
        in_channels: int = 3,
        out_indices: int | Sequence[int] = -1,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        with_cls_token: bool = True,
        out_type: str = 'cls_token',
        final_norm: bool = True,
        act_cfg: dict = dict(type='GELU'),
        norm_cfg: dict = dict(type='LN', eps=1e-6),
        with_cp: bool = False,
        frozen_stages: int = -1,
        upstream: str | None = None,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(arch, init_cfg, upstream)
        embed_dims, num_layers, num_heads, ffn_channels = (self.arch_settings[k] for k in self.arch_keys)
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'out_type={out_type!r} is not one of {self.OUT_TYPES}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("out_type='cls_token' needs with_cls_token=True")
        if self.distilled and not with_cls_token:
            raise ValueError(f'{type(self).__name__}: with_cls_token=False is not supported (the distillation '
                             'token comes after the class token); only with_cls_token=True')
        for name, p in (('drop_rate', drop_rate), ('drop_path_rate', drop_path_rate)):
            if not 0 <= p < 1:
                raise ValueError(f'{name}={p} must be in [0, 1)')
        self.embed_dims, self.num_layers = embed_dims, num_layers
        attn_cfgs = self.check_stage_args(num_layers, out_indices, frozen_stages, attn_cfgs, 'layer')
        self.out_type, self.final_norm = out_type, final_norm
        self.num_prefix_tokens = int(with_cls_token) + self.distilled

        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=embed_dims, kernel_size=patch_size, stride=patch_size,
            input_size=to_pair(pretrain_img_size, 'pretrain_img_size'))
        self.patch_resolution = self.pos_shape = self.patch_embed.init_out_size  # pos_shape: for the loader
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims)) if with_cls_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dims)) if self.distilled else None
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_prefix_tokens + self.patch_resolution[0]
                                                  * self.patch_resolution[1], embed_dims))
        self.drop_after_pos = nn.Dropout(drop_rate)
        self.layers = nn.ModuleList(build_blocks(
            attn_cfgs, embed_dims, num_heads, ffn_channels, torch.linspace(0, drop_path_rate, num_layers).tolist(),
            qkv_bias=qkv_bias, attn_drop=attn_drop_rate, drop_rate=drop_rate, pos_shape=self.patch_resolution,
            num_prefix_tokens=self.num_prefix_tokens, act_cfg=act_cfg, norm_cfg=norm_cfg, with_cp=with_cp,
            block=ViTLayer))
        if final_norm:
            self.ln1 = build_norm_layer(norm_cfg, embed_dims)[1]
        if out_type == 'avg_featmap':
            self.ln2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self._freeze_stages()

    def frozen_parts(self) -> list[nn.Module | nn.Parameter | None]:
        if self.frozen_stages < 0:
            return []
        parts = [self.patch_embed, self.pos_embed, self.drop_after_pos, self.cls_token,
                 *self.layers[:self.frozen_stages]]
        if self.upstream is None:  # mmpretrain leaves its distillation token trainable
            parts.append(self.dist_token)
        if self.frozen_stages == self.num_layers:
            parts += [getattr(self, n, None) for n in ('ln1', 'ln2')]
        return parts

    @staticmethod
    def convert_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return convert_vit_checkpoint(state_dict)

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x, hw_shape = self.patch_embed(x)
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.dist_token) if t is not None]
        x = torch.cat([*prefix, x], dim=1)
        x = self.drop_after_pos(x + position_table_at(self.pos_embed, self.pos_shape, hw_shape,
                                                      self.num_prefix_tokens))
        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x, hw_shape)
            if i == self.num_layers - 1 and self.final_norm:
                x = self.ln1(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw_shape))
        return tuple(outs)

    def _format_output(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor | tuple[Tensor, Tensor]:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return (x[:, 0], x[:, 1]) if self.distilled else x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if self.out_type == 'featmap':
            return nlc_to_nchw(patches, hw_shape)
        return self.ln2(patches.mean(dim=1))


VIT_RENAMES = (
    (r'^blocks\.', 'layers.'), (r'^norm\.', 'ln1.'), (r'^patch_embed\.proj\.', 'patch_embed.projection.'),
    (r'\.mlp\.fc1\.', '.ffn.layers.0.0.'), (r'\.mlp\.fc2\.', '.ffn.layers.1.'),          # official DeiT
    (r'^(layers\.\d+)\.norm([12])\.', r'\1.ln\2.'),       # official DeiT, LiSAViT before mmpretrain's names
    (r'\.attn\.attn\.in_proj_', '.attn.qkv.'), (r'\.attn\.attn\.out_proj\.', '.attn.proj.'),  # mmseg
    (r'^pos_embed\.weight$', 'pos_embed'),                                  # LiSAViT before mmpretrain's names
)


def convert_vit_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename an official DeiT (facebookresearch/deit, timm's layout), an mmseg
    ``VisionTransformer`` or an older LiSAViT checkpoint to LiSAViT's keys, which are
    mmpretrain's, by :data:`VIT_RENAMES` (``blocks.{i}.mlp.fc1`` -> ``layers.{i}.ffn.layers.0.0``,
    ``blocks.{i}.norm1`` / LiSAViT's former ``layers.{i}.norm1`` -> ``layers.{i}.ln1``,
    ``attn.attn.in_proj_*`` -> ``attn.qkv.*``, LiSAViT's former ``pos_embed.weight`` ->
    ``pos_embed``, ...); mmpretrain's keys pass unchanged. A classifier's ``head.*`` is left as
    it is (reported as unused).
    """
    out = {}
    for key, value in state_dict.items():
        for pattern, replacement in VIT_RENAMES:
            key = re.sub(pattern, replacement, key)
        out[key] = value
    return out


class LiSADistilledViT(LiSAViT):
    """DeiT with its distillation token (Touvron et al., Sec. 5): :class:`LiSAViT` whose tokens are
    ``[cls; dist; p_1 .. p_HW]``, as mmpretrain's ``DistilledVisionTransformer``.

    Both tokens are prefix tokens of every attention (``num_prefix_tokens=2``) and have rows of
    ``pos_embed`` ``(1, 2 + H0 * W0, C)``; ``dist_token`` ``(1, 1, C)`` is drawn as ``cls_token``.
    ``out_type='cls_token'`` gives ``(cls, dist)`` per out index (mmpretrain's ``DeiTClsHead``
    reads both). ``with_cls_token`` is always True. ``frozen_stages >= 0`` freezes the
    distillation token with the embeddings, but not with mmpretrain's arguments (as there).
    Arguments as :class:`LiSAViT`'s, or mmpretrain's (:func:`.upstream.from_mmpretrain_vit`).
    """

    distilled = True
