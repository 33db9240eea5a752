"""DeiT / plain ViT with a selectable attention (LiSA, FLatten, linear, softmax).

DeiT: Touvron et al., "Training data-efficient image transformers & distillation
through attention", ICML 2021; ViT: Dosovitskiy et al., ICLR 2021. LiSA's DeiT
rows (Table 1, Tables 5-8 of arXiv 2611.04216) swap the attention of every
layer and keep the rest of DeiT as it is.

With ``attn_cfg=dict(type='softmax')`` the model is mmpretrain's
``VisionTransformer`` layer for layer: the same parameters under the same names
except ``pos_embed`` (here ``pos_embed.weight``, see
:func:`convert_mmpretrain_vit`), and the same outputs.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import torch
import torch.utils.checkpoint as cp
from mmcv.cnn.bricks import DropPath
from mmcv.cnn.bricks.transformer import FFN, PatchEmbed
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_
from torch import Tensor, nn

from ..attention import ATTENTIONS, KernelAttention, build_attention
from ..attention.base import PositionalEncoding


class TransformerEncoderLayer(nn.Module):
    """Pre-norm ViT layer ``x + attn(ln1(x))``, then ``x + ffn(ln2(x))``.

    Names follow mmpretrain's layer (``ln1``, ``attn.qkv``, ``attn.proj``,
    ``ln2``, ``ffn.layers``), so its checkpoints load unchanged.
    """

    def __init__(
        self,
        embed_dims: int,
        num_heads: int,
        feedforward_channels: int,
        attn_cfg: Mapping,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_eps: float = 1e-6,
        **attn_defaults,
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(embed_dims, eps=norm_eps)
        self.attn = build_attention(attn_cfg, embed_dims, num_heads, proj_drop=drop_rate, **attn_defaults)
        self.drop_path = DropPath(drop_path_rate)
        self.ln2 = nn.LayerNorm(embed_dims, eps=norm_eps)
        self.ffn = FFN(
            embed_dims=embed_dims,
            feedforward_channels=feedforward_channels,
            act_cfg=dict(type='GELU'),
            ffn_drop=drop_rate,
            dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate))

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        x = x + self.drop_path(self.attn(self.ln1(x), hw_shape))
        return self.ffn(self.ln2(x), identity=x)


class LiSAViT(BaseModule):
    """DeiT / ViT whose layers all use the attention built from ``attn_cfg``.

    Tokens ``[cls; p_1 .. p_HW]`` (the class token first, the patches
    row-major on the ``(H, W)`` patch grid) go through every layer together.
    The attention sees the class token as a prefix token
    (``num_prefix_tokens=1``): the random walk of LiSA and the kernel
    normalisation run over all ``1 + HW`` tokens, while the 3x3 local branch,
    the depthwise conv and the learnable positional encoding on ``k`` act on
    the patch grid only (:mod:`..attention`).

    Choices where the papers are silent:

    * kernel attentions get ``pos_shape`` = the patch grid of ``img_size``;
      for another input size their positional encoding and the model's
      ``pos_embed`` are resized bicubically (in the forward pass, and when a
      checkpoint of another grid is loaded, as mmpretrain does);
    * ``frozen_stages=0`` freezes the embeddings (patch embedding, class
      token, ``pos_embed``), ``k`` also layers ``1..k``, ``num_layers`` also the
      final norms; frozen parts stay in eval mode (mmdet's convention);
    * ``attn_cfg`` is one dict for all layers; its keys override the defaults
      the backbone supplies (``qkv_bias=True``, ``proj_drop=drop_rate``,
      ``num_prefix_tokens``, and ``pos_shape`` for kernel attentions).
      Attention dropout exists only for softmax: ``attn_cfg=dict(type='softmax',
      attn_drop=0.1)``.

    Args:
        arch: 'deit-tiny' / 'deit-t' / 'tiny' / 't' (embed 192, 3 heads),
            'deit-small' (384, 6), 'deit-base' (768, 12), each 12 layers with
            MLP ratio 4; or a dict with ``embed_dims``, ``num_layers``,
            ``num_heads``, ``feedforward_channels``.
        img_size: training input size (int or (H, W)); other sizes work.
        patch_size: patch (and stride) size of the patch embedding.
        in_channels: input channels.
        attn_cfg: ``dict(type=NAME, **kwargs)`` for :func:`build_attention`.
        out_indices: layers whose output is returned (negative from the end).
        drop_rate: dropout after the position embedding, the attention
            projection and in the MLP.
        drop_path_rate: stochastic depth, linearly increasing over layers.
        with_cls_token: prepend a class token.
        out_type: 'cls_token' (B, C), 'featmap' (B, C, H, W), 'avg_featmap'
            (B, C: mean of the patch tokens, then LayerNorm ``ln2``) or 'raw'
            (B, N, C), per out index, as mmpretrain's ``VisionTransformer``.
        final_norm: LayerNorm ``ln1`` after the last layer.
        with_cp: gradient checkpointing of every layer in training.
        frozen_stages: -1 (none) .. num_layers, see above.
        init_cfg: default is DeiT's initialisation (truncated normal 0.02 for
            linear layers, zero bias, LayerNorm 1/0); ``pos_embed`` and the
            class token are drawn from a truncated normal 0.02 unless the
            model is loaded from a checkpoint.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny', 'deit-t', 'deit-tiny'], {
            'embed_dims': 192, 'num_layers': 12, 'num_heads': 3, 'feedforward_channels': 192 * 4}),
        **dict.fromkeys(['s', 'small', 'deit-s', 'deit-small'], {
            'embed_dims': 384, 'num_layers': 12, 'num_heads': 6, 'feedforward_channels': 384 * 4}),
        **dict.fromkeys(['b', 'base', 'deit-b', 'deit-base'], {
            'embed_dims': 768, 'num_layers': 12, 'num_heads': 12, 'feedforward_channels': 768 * 4}),
    }
    ARCH_KEYS = ('embed_dims', 'num_layers', 'num_heads', 'feedforward_channels')
    OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')

    def __init__(
        self,
        arch: str | Mapping = 'deit-tiny',
        img_size: int | Sequence[int] = 224,
        patch_size: int = 16,
        in_channels: int = 3,
        attn_cfg: Mapping = dict(type='lisa'),
        out_indices: int | Sequence[int] = -1,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        with_cls_token: bool = True,
        out_type: str = 'cls_token',
        final_norm: bool = True,
        with_cp: bool = False,
        frozen_stages: int = -1,
        init_cfg: Mapping | Sequence[Mapping] | None = (
            dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
            dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)),
    ) -> None:
        super().__init__(init_cfg=list(init_cfg) if isinstance(init_cfg, tuple) else init_cfg)
        self.arch_settings = self._arch(arch)
        embed_dims, num_layers, num_heads, ffn_channels = (self.arch_settings[k] for k in self.ARCH_KEYS)
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'out_type={out_type!r} is not one of {self.OUT_TYPES}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("out_type='cls_token' needs with_cls_token=True")
        if not -1 <= frozen_stages <= num_layers:
            raise ValueError(f'frozen_stages={frozen_stages} must be in [-1, num_layers={num_layers}]')
        for name, p in (('drop_rate', drop_rate), ('drop_path_rate', drop_path_rate)):
            if not 0 <= p < 1:
                raise ValueError(f'{name}={p} must be in [0, 1)')
        self.embed_dims, self.num_layers = embed_dims, num_layers
        self.out_indices = self._out_indices(out_indices, num_layers)
        self.out_type, self.final_norm = out_type, final_norm
        self.with_cp, self.frozen_stages = with_cp, frozen_stages
        self.num_prefix_tokens = int(with_cls_token)

        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=embed_dims, kernel_size=patch_size, stride=patch_size,
            input_size=img_size)
        self.patch_resolution = self.patch_embed.init_out_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims)) if with_cls_token else None
        self.pos_embed = PositionalEncoding(embed_dims, self.patch_resolution, self.num_prefix_tokens)
        self.drop_after_pos = nn.Dropout(drop_rate)

        attn_defaults = dict(qkv_bias=True, num_prefix_tokens=self.num_prefix_tokens)
        attn_type = dict(attn_cfg).get('type')
        if attn_type in ATTENTIONS and issubclass(ATTENTIONS[attn_type], KernelAttention):
            attn_defaults['pos_shape'] = self.patch_resolution
        dpr = torch.linspace(0, drop_path_rate, num_layers).tolist()
        self.layers = ModuleList(
            TransformerEncoderLayer(embed_dims, num_heads, ffn_channels, attn_cfg, drop_rate, dpr[i],
                                    **attn_defaults) for i in range(num_layers))
        if final_norm:
            self.ln1 = nn.LayerNorm(embed_dims, eps=1e-6)
        if out_type == 'avg_featmap':
            self.ln2 = nn.LayerNorm(embed_dims, eps=1e-6)
        self._register_load_state_dict_pre_hook(self._resize_positional_encodings)
        self._freeze_stages()

    @classmethod
    def _arch(cls, arch: str | Mapping) -> dict:
        if isinstance(arch, str):
            if arch.lower() not in cls.arch_zoo:
                raise ValueError(f'arch={arch!r} is not one of {sorted(cls.arch_zoo)}')
            return dict(cls.arch_zoo[arch.lower()])
        if not isinstance(arch, Mapping) or not set(cls.ARCH_KEYS) <= set(arch):
            raise ValueError(f'a custom arch must be a dict with keys {cls.ARCH_KEYS}, got {arch!r}')
        return dict(arch)

    @staticmethod
    def _out_indices(out_indices: int | Sequence[int], num_layers: int) -> tuple[int, ...]:
        indices = [out_indices] if isinstance(out_indices, int) else list(out_indices)
        if not indices or any(not -num_layers <= i < num_layers for i in indices):
            raise ValueError(f'out_indices={out_indices} must be non-empty layer indices '
                             f'in [-{num_layers}, {num_layers})')
        indices = sorted(i % num_layers for i in indices)
        if len(set(indices)) != len(indices):
            raise ValueError(f'out_indices={out_indices} names a layer twice')
        return tuple(indices)

    def init_weights(self) -> None:
        super().init_weights()
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg or {}]
        if any(cfg.get('type') == 'Pretrained' for cfg in cfgs):
            return
        trunc_normal_(self.pos_embed.weight, std=0.02)
        if self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)
        # init_cfg's generic Linear rule must not overwrite an attention's own
        # initialisation (e.g. LiSA's step MLP starting at the geometric weights).
        for layer in self.layers:
            if hasattr(layer.attn, 'reset_parameters'):
                layer.attn.reset_parameters()

    def _resize_positional_encodings(self, state_dict: dict, prefix: str, *args) -> None:
        """Resize every positional encoding of a checkpoint trained on another
        (square) patch grid to this model's grid, bicubically."""
        for name, module in self.named_modules():
            key = f'{prefix}{name}.weight'
            if not isinstance(module, PositionalEncoding) or key not in state_dict:
                continue
            weight = state_dict[key]
            grid_tokens = weight.shape[1] - module.num_prefix_tokens
            side = math.isqrt(max(grid_tokens, 0))
            if weight.shape == module.weight.shape or side * side != grid_tokens:
                continue  # same grid, or not a square one (load_state_dict reports the mismatch)
            source = PositionalEncoding(weight.shape[-1], (side, side), module.num_prefix_tokens)
            source.weight.data = weight.float()  # bicubic needs float32 on some devices
            with torch.no_grad():
                state_dict[key] = source(module.pos_shape).to(weight.dtype)

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        frozen = [self.patch_embed, self.pos_embed, self.drop_after_pos, *self.layers[:self.frozen_stages]]
        if self.frozen_stages == self.num_layers:
            frozen += [getattr(self, n) for n in ('ln1', 'ln2') if hasattr(self, n)]
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False
        if self.cls_token is not None:
            self.cls_token.requires_grad = False

    def train(self, mode: bool = True) -> LiSAViT:
        super().train(mode)
        if mode:
            self._freeze_stages()
        return self

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x, hw_shape = self.patch_embed(x)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop_after_pos(x + self.pos_embed(hw_shape))
        outs = []
        for i, layer in enumerate(self.layers):
            if self.with_cp and self.training and x.requires_grad:
                x = cp.checkpoint(layer, x, hw_shape, use_reentrant=False)
            else:
                x = layer(x, hw_shape)
            if i == self.num_layers - 1 and self.final_norm:
                x = self.ln1(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw_shape))
        return tuple(outs)

    def _format_output(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if self.out_type == 'featmap':
            return patches.transpose(1, 2).reshape(x.shape[0], x.shape[-1], *hw_shape)
        return self.ln2(patches.mean(dim=1))


def convert_mmpretrain_vit(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Map a state dict of mmpretrain's ``VisionTransformer`` (or of a model
    holding one, e.g. ``backbone.``-prefixed) to :class:`LiSAViT`'s keys.

    Every other key is shared: ``patch_embed.projection``, ``cls_token``,
    ``layers.i.{ln1, attn.qkv, attn.proj, ln2, ffn.layers.0.0, ffn.layers.1}``,
    ``ln1``, ``ln2``. Only the position embedding moves into a module.
    """
    return {re.sub(r'(^|\.)pos_embed$', r'\1pos_embed.weight', k): v for k, v in state_dict.items()}
