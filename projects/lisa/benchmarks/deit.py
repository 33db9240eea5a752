"""DeiT built from the attention modules with torch alone, for the Table 13 benchmark.

DeiT: Touvron et al., ICML 2021; LiSA supp. Table 13 times DeiT-T with
softmax, FLatten and LiSA attention. :class:`DeiT` is the forward pass of
``projects.lisa.models.backbones.LiSAViT`` (class token, ``out_type='cls_token'``,
final norm) without its OpenMMLab bricks. Why a second DeiT: ``LiSAViT`` is built from
mmcv's ``FFN``, ``build_norm_layer`` and ``DropPath`` on mmengine's ``BaseModule`` (``init_cfg``,
checkpoint loading), and the benchmark must run where no OpenMMLab package is installed (a GPU
machine with torch alone: ``tools/gpu_check.py`` imports with torch only, tests/test_gpu_check.py).
What the attention changes is shared, not copied: every block's attention is built by
``build_attention`` and the position table is resized by
:func:`..models.attention.layers.position_table_at`, as in ``LiSAViT``; only patch embedding, MLP
and block wiring are restated here (a few lines each). Same parameter names (mmpretrain's), so a
``LiSAViT`` state dict loads unchanged and gives the same outputs (tests/test_gpu_check.py checks
both). No dropout, no stochastic depth: a model for timing, not for training.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..models.attention import ATTENTIONS, KernelAttention, build_attention
from ..models.attention.layers import position_table_at

# The attention of configs/classification/deit-tiny_{softmax,flatten,lisa}_8xb128_in1k.py.
DEIT_TINY_ATTENTIONS = {
    'softmax': dict(type='softmax'),
    'flatten': dict(type='flatten'),
    'lisa': dict(type='lisa', num_steps=3),
}


class PatchEmbed(nn.Module):
    """Non-overlapping ``p x p`` patches, the bottom/right edge zero-padded to a multiple of ``p``."""

    def __init__(self, in_channels: int, dim: int, patch_size: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.projection = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        p = self.patch_size
        x = self.projection(F.pad(x, (0, -x.shape[-1] % p, 0, -x.shape[-2] % p)))  # (B, C, H, W)
        return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])


class FFN(nn.Module):
    """``Linear, GELU, Linear`` under the names of mmcv's FFN (``layers.0.0``, ``layers.1``)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Sequential(nn.Linear(dim, hidden), nn.GELU()), nn.Linear(hidden, dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)


class Layer(nn.Module):
    """Pre-norm layer ``x + attn(ln1(x))``, then ``x + ffn(ln2(x))`` (LiSAViT's block names, mmpretrain's)."""

    def __init__(self, dim: int, num_heads: int, hidden: int, attn_cfg: Mapping, **attn_defaults) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = build_attention(attn_cfg, dim, num_heads, **attn_defaults)
        self.ln2 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = FFN(dim, hidden)

    def forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        x = x + self.attn(self.ln1(x), hw_shape)
        return x + self.ffn(self.ln2(x))


class DeiT(nn.Module):
    """DeiT with one attention in every layer; returns the class token's features ``(B, C)``.

    Tokens ``[cls; patches]``; the attention sees the class token as a prefix
    token, and kernel attentions get ``pos_shape`` = the patch grid of ``img_size``.
    Defaults: DeiT-T (C = 192, 3 heads, 12 layers, MLP ratio 4, patch 16).
    """

    def __init__(self, attn_cfg: Mapping, img_size: int = 224, patch_size: int = 16, embed_dims: int = 192,
                 num_layers: int = 12, num_heads: int = 3, mlp_ratio: int = 4, in_channels: int = 3) -> None:
        super().__init__()
        self.grid = grid = (-(-img_size // patch_size), ) * 2
        self.patch_embed = PatchEmbed(in_channels, embed_dims, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dims))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid[0] * grid[1], embed_dims))
        defaults = dict(qkv_bias=True, num_prefix_tokens=1)
        if issubclass(ATTENTIONS[attn_cfg['type']], KernelAttention):
            defaults['pos_shape'] = grid
        self.layers = nn.ModuleList(
            Layer(embed_dims, num_heads, mlp_ratio * embed_dims, attn_cfg, **defaults) for _ in range(num_layers))
        self.ln1 = nn.LayerNorm(embed_dims, eps=1e-6)

    def forward(self, x: Tensor) -> Tensor:
        x, hw_shape = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + position_table_at(self.pos_embed, self.grid, hw_shape, num_prefix_tokens=1)
        for layer in self.layers:
            x = layer(x, hw_shape)
        return self.ln1(x)[:, 0]
