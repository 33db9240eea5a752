"""BiFormer with a selectable attention per stage.

BiFormer (Zhu et al., CVPR 2023, https://arxiv.org/abs/2303.08810) as LiSA's
Table 2 uses it. With :data:`BRA_ATTN_CFGS` (bi-level routing attention with
top-k 1, 4, 16 in stages 1-3, global attention in stage 4) the model is the
official BiFormer (github.com/rayleizhu/BiFormer, ``models/biformer.py``): the
same parameters, and the same outputs given the same weights
(:func:`convert_biformer_checkpoint` reads its checkpoints).

Where LiSA enters (the paper does not say): :data:`LISA_ATTN_CFGS`, LiSA in
place of BRA in every block of stages 1-3, BiFormer's global attention kept in
stage 4. BRA is BiFormer's device for making attention affordable on the long
token sequences of the high-resolution stages -- the part LiSA replaces with a
linear-cost global operator, as FLatten-Swin replaces the windows of Swin's
stages 1-2. Stage 4 is already global softmax attention over few tokens (49 at
224 px), where LiSA would save nothing and its O(T d^3) walk is hardest to
amortise (the paper's supplement §9-10). LiSA has no absolute position table
here (``pos_shape=None``): every BiFormer block already starts with a 3x3
depthwise positional convolution, and the table would add ~8% parameters to
BiFormer-T. LiSA in all four stages, or in stages 1-2 only, is a change of
``attn_cfgs``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from mmcv.cnn import build_norm_layer
from torch import Tensor, nn

from .base import LiSABackbone
from .blocks import TransformerBlock, build_blocks, stage_drop_path_rates
from .checks import to_pair
from .grid import nlc_to_nchw

#: BiFormer: BRA with 7 x 7 regions and top-k 1, 4, 16; global attention with LePE in stage 4.
BRA_ATTN_CFGS = [dict(type='bra', n_win=7, topk=k) for k in (1, 4, 16)] + [dict(type='lepe', qkv_bias=False)]
#: LiSA-BiFormer (our choice, see the module docstring): LiSA (T = 3) in stages 1-3.
LISA_ATTN_CFGS = [dict(type='lisa', num_steps=3, pos_shape=None)] * 3 + [dict(type='lepe', qkv_bias=False)]


class BiFormerBlock(TransformerBlock):
    """BiFormer's block: a depthwise positional convolution, then the pre-norm block::

        x <- x + DWConv_3x3(x)
        x <- x + DropPath(Attn(LN(x), hw_shape))
        x <- x + DropPath(MLP(LN(x)))            MLP = Linear, GELU, Linear
    """

    def __init__(self, dim: int, attn: nn.Module, ffn_channels: int, *args, **kwargs) -> None:
        super().__init__(dim, attn, ffn_channels, *args, **kwargs)
        self.pos_embed = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def _forward(self, x: Tensor, hw_shape: Sequence[int]) -> Tensor:
        x = x + self.pos_embed(nlc_to_nchw(x, hw_shape)).flatten(2).transpose(1, 2)
        return super()._forward(x, hw_shape)


def _conv_bn(in_channels: int, out_channels: int, norm_cfg: dict) -> list[nn.Module]:
    """A 3x3 stride-2 convolution (padding 1: ``ceil(H / 2)`` rows out) and its norm."""
    return [nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1), build_norm_layer(norm_cfg, out_channels)[1]]


def _channel_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """``norm`` over the channels of ``(B, C, H, W)`` maps (a LayerNorm channel-last)."""
    if isinstance(norm, nn.LayerNorm):
        return norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).contiguous()  # NCHW memory, as nlc_to_nchw
    return norm(x)


class LiSABiFormer(LiSABackbone):
    """BiFormer backbone whose attention is chosen per stage.

    Stem: two 3x3 stride-2 convolutions (``C/2`` then ``C`` channels) with
    BatchNorm and a GELU between; before stages 2-4 a 3x3 stride-2 convolution
    and BatchNorm. Blocks: :class:`BiFormerBlock` (LayerNorm eps 1e-6, MLP
    ratio 3, no layer scale). Inputs of any size: stage ``i`` has
    ``ceil(H / 2^(i+2))`` rows; BRA pads each map to a multiple of its regions.

    Args:
        arch: 't'/'tiny', 's'/'small', 'b'/'base', or a dict with per-stage
            lists ``embed_dims``, ``depths``, ``num_heads``, ``mlp_ratios``.
            Heads are BiFormer's: ``dim / 32`` in stages 1-3, 8 in stage 4.
        attn_cfgs: one ``dict(type=NAME, **kwargs)`` for all stages or one per
            stage, NAME a registered attention ('bra', 'lepe', 'lisa', 'flatten',
            'softmax', ...); :data:`BRA_ATTN_CFGS` is BiFormer,
            :data:`LISA_ATTN_CFGS` (default) LiSA-BiFormer. Every type gets the
            context of ``..attention.CONTEXT``: dim, heads, ``qkv_bias``,
            ``attn_drop=attn_drop_rate``, ``proj_drop=drop_rate``, ``pos_shape``
            (the stage's grid at ``pretrain_img_size``), ``block_index``; kwargs
            override them.
        out_indices: stages whose outputs are returned (strides 4, 8, 16, 32).
        conv_norm_cfg: norm of the stem and downsampling convolutions (BN;
            SyncBN in BiFormer's dense models).
        final_norm_cfg: norm of the last stage's output (``norm``): BatchNorm
            as in BiFormer's classifier, so an ImageNet checkpoint initialises
            it. BiFormer's dense models drop it for a LayerNorm; give
            ``dict(type='LN', eps=1e-6)`` for that.
        out_norm_cfg: norm ``norm{i}`` of each other returned stage (BiFormer's
            dense models: LayerNorm, new, as the ImageNet model has none).
        drop_path_rate: stochastic depth, rising linearly over the blocks.
        frozen_stages: -1 freezes nothing, 0 the stem, k also the stages 1..k
            (with their downsampling and output norms).
        with_cp: gradient checkpointing of every block.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=..., allow_new=...)``
            (:class:`.base.LiSABackbone`): an official BiFormer checkpoint or a
            LiSABiFormer one (e.g. of an mmpretrain classifier, ``prefix='backbone.'``);
            keys converted by :func:`convert_biformer_checkpoint`.
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=[64, 128, 256, 512], depths=[2, 2, 8, 2],
                                            num_heads=[2, 4, 8, 8], mlp_ratios=[3, 3, 3, 3])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=[64, 128, 256, 512], depths=[4, 4, 18, 4],
                                             num_heads=[2, 4, 8, 8], mlp_ratios=[3, 3, 3, 3])),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=[96, 192, 384, 768], depths=[4, 4, 18, 4],
                                            num_heads=[3, 6, 12, 8], mlp_ratios=[3, 3, 3, 3])),
    }  # yapf: disable
    arch_keys = stage_keys = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios')

    def __init__(
        self,
        arch: str | Mapping = 'tiny',
        attn_cfgs: Mapping | Sequence[Mapping] = LISA_ATTN_CFGS,
        pretrain_img_size: int | Sequence[int] = 224,
        in_channels: int = 3,
        out_indices: int | Sequence[int] = (0, 1, 2, 3),
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        norm_cfg: dict = dict(type='LN', eps=1e-6),
        conv_norm_cfg: dict = dict(type='BN'),
        final_norm_cfg: dict = dict(type='BN'),
        out_norm_cfg: dict = dict(type='LN', eps=1e-6),
        frozen_stages: int = -1,
        with_cp: bool = False,
        init_cfg: dict | None = None,
    ) -> None:
        super().__init__(arch, init_cfg)
        settings, num_stages = self.arch_settings, self.num_stages
        attn_cfgs = self.check_stage_args(num_stages, out_indices, frozen_stages, attn_cfgs)
        dims, depths = settings['embed_dims'], settings['depths']

        stem = _conv_bn(in_channels, dims[0] // 2, conv_norm_cfg)
        stem = nn.Sequential(*stem, nn.GELU(), *_conv_bn(dims[0] // 2, dims[0], conv_norm_cfg))
        self.downsample_layers = nn.ModuleList(
            [stem] + [nn.Sequential(*_conv_bn(dims[i], dims[i + 1], conv_norm_cfg)) for i in range(num_stages - 1)])
        grid = tuple(-(-s // 4) for s in to_pair(pretrain_img_size, 'pretrain_img_size'))
        self.stages = nn.ModuleList()
        for i, (dim, depth, heads, mlp_ratio, rates) in enumerate(
                zip(*(settings[k] for k in self.arch_keys), stage_drop_path_rates(drop_path_rate, depths))):
            self.stages.append(nn.ModuleList(build_blocks(
                [attn_cfgs[i]] * depth, dim, heads, int(mlp_ratio * dim), rates, f'stage {i}, ', qkv_bias=qkv_bias,
                attn_drop=attn_drop_rate, drop_rate=drop_rate, pos_shape=grid, norm_cfg=norm_cfg, with_cp=with_cp,
                block=BiFormerBlock)))
            grid = tuple(-(-g // 2) for g in grid)
        self.norm = build_norm_layer(final_norm_cfg, dims[-1])[1]
        for i in self.out_indices:
            if i < num_stages - 1:
                self.add_module(f'norm{i}', build_norm_layer(out_norm_cfg, dims[i])[1])
        self._freeze_stages()

    def out_norm(self, i: int) -> nn.Module | None:
        """The norm of stage ``i``'s output: ``norm`` for the last stage, else ``norm{i}`` (if returned)."""
        return self.norm if i == len(self.stages) - 1 else getattr(self, f'norm{i}', None)

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, (downsample, blocks) in enumerate(zip(self.downsample_layers, self.stages)):
            x = downsample(x)
            hw_shape = x.shape[2:]
            x = x.flatten(2).transpose(1, 2)
            for block in blocks:
                x = block(x, hw_shape)
            x = nlc_to_nchw(x, hw_shape)
            if i in self.out_indices:
                outs.append(_channel_norm(self.out_norm(i), x))
        return tuple(outs)

    def frozen_parts(self) -> list[nn.Module | None]:
        if self.frozen_stages < 0:
            return []
        k = self.frozen_stages
        return [*self.downsample_layers[:max(k, 1)], *self.stages[:k],
                *(self.out_norm(i) for i in range(k) if i in self.out_indices)]

    @staticmethod
    def convert_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
        return convert_biformer_checkpoint(state_dict)


#: Official block parameter names -> ours (``{stage}.{block}.`` prefix kept).
_BLOCK_KEYS = {
    'attn.qkv.qkv.': 'attn.qkv.',   # BRA: rows [q; k; v] as here
    'attn.wo.': 'attn.proj.',
    'mlp.0.': 'ffn.layers.0.0.',
    'mlp.3.': 'ffn.layers.1.',
}


def convert_biformer_checkpoint(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Rename an official BiFormer checkpoint (``ckpt['model']``) to LiSABiFormer keys.

    Other state dicts (e.g. of an mmpretrain classifier) pass unchanged. With ``i``
    the stage, ``j`` the block::

        downsample_layers.*, norm.*          -> the same (stem / downsampling convs, final BatchNorm)
        stages.{i}.{j}.attn.qkv.qkv.*        -> stages.{i}.{j}.attn.qkv.*   (BRA)
        stages.{i}.{j}.attn.wo.*             -> stages.{i}.{j}.attn.proj.*  (BRA)
        stages.{i}.{j}.attn.lepe.*           -> stages.{i}.{j}.attn.lce.*   (BRA; LePEAttention keeps lepe)
        stages.{i}.{j}.mlp.0.* / mlp.3.*     -> stages.{i}.{j}.ffn.layers.0.0.* / ffn.layers.1.*
        stages.{i}.{j}.<rest>                -> the same (pos_embed, norm1, norm2, attn.qkv/proj of stage 4)
        head.*                               -> dropped (classification head)

    A BRA block is told from a global one by its ``attn.wo`` (only BRA has it).
    """
    if not any(re.match(r'stages\.\d+\.\d+\.mlp\.', k) for k in state_dict):
        return dict(state_dict)
    bra_blocks = {k[:-len('attn.wo.weight')] for k in state_dict if k.endswith('.attn.wo.weight')}
    out = {}
    for key, value in state_dict.items():
        if key.startswith('head.'):
            continue
        if m := re.fullmatch(r'(stages\.\d+\.\d+\.)(.+)', key):
            block, rest = m.groups()
            for old, new in _BLOCK_KEYS.items():
                if rest.startswith(old):
                    rest = new + rest[len(old):]
            if block in bra_blocks and rest.startswith('attn.lepe.'):
                rest = 'attn.lce.' + rest[len('attn.lepe.'):]
            key = block + rest
        out[key] = value
    return out
