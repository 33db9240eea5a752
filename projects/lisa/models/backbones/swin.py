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
(:func:`from_upstream_swin`): a config of one of them with only its ``type`` changed
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

from .base import (
    LiSABackbone,
    accepts_upstream_args,
    build_blocks,
    named_upstream,
    nlc_to_nchw,
    one_vocabulary,
    pretrained_to_init_cfg,
    reject_unsupported,
    resize_grid_tokens,
    set_attn_arg,
    stage_drop_path_rates,
    to_pair,
)

# the arguments of the upstream SwinTransformers (mmseg 1.2 = mmdet 3.3 but for convert_weights,
# mmpretrain 1.2) that LiSASwinTransformer does not share, with their defaults
MMSEG_SWIN_ONLY = dict(embed_dims=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], strides=None, qk_scale=None,
                       pretrained=None, convert_weights=False)
MMPRETRAIN_SWIN_ONLY = dict(img_size=224, out_after_downsample=False, interpolate_mode='bicubic', norm_eval=False,
                            pad_small_map=False, stage_cfgs={}, patch_cfg={})
UPSTREAM_SWIN = dict(window_size=7)  # in both
# this class's arguments that mmpretrain's are translated to (not to be mixed with them)
MMPRETRAIN_SWIN_TARGETS = ('pretrain_img_size', 'block_cfgs', 'downsample_cfgs', 'out_norm_cfg')


#: mmpretrain's SwinBlockSequence (``stage_cfgs``) and SwinBlock (``block_cfgs``) arguments with no
#: counterpart here, and why
STAGE_CFG_REASONS = dict(
    downsample='every stage but the last ends with a patch merging', depth='arch sets it', num_heads='arch sets it',
    embed_dims='arch sets it', init_cfg='the backbone initialises every layer (init_weights, init_cfg)')
#: the keys of a SwinBlockSequence / SwinBlock config that map here
STAGE_KEYS = ('window_size', 'pad_small_map', 'with_cp', 'drop_paths', 'downsample_cfg', 'block_cfgs')
BLOCK_KEYS = ('window_size', 'pad_small_map', 'shift', 'with_cp', 'drop_path', 'norm_cfg', 'ffn_ratio', 'ffn_cfgs',
              'attn_cfgs')
WINDOW_KEYS = ('window_size', 'pad_small_map')  # set by from_upstream_swin as the backbone's window_size
WINDOW_MSA_KEYS = ('qkv_bias', 'attn_drop', 'proj_drop')  # mmpretrain's WindowMSA's, the window attention's too
FFN_KEYS = ('feedforward_channels', 'num_fcs', 'act_cfg', 'ffn_drop', 'dropout_layer', 'add_identity',
            'layer_scale_init_value')  # mmcv's FFN, the block's as mmpretrain's
INIT_REASON = STAGE_CFG_REASONS['init_cfg']


def _mapped(where: str, cfg: Mapping, mapped: Sequence[str], only: Mapping[str, tuple],
            reasons: Mapping[str, str], upstream: str) -> dict:
    """The items of ``cfg`` (mmpretrain's ``where``, an ``upstream`` config) that map here: the keys
    in ``mapped``, and those of ``only`` at one of their values; any other raises with the reason."""
    for key, value in cfg.items():
        if key in mapped or (key in only and any(value == v for v in only[key])):
            continue
        valid = (f'only {" or ".join(map(repr, only[key]))}' if key in only
                 else f'it may set {", ".join([*mapped, *only])}')
        raise ValueError(f'{where}{key}={value!r} is not supported '
                         f"({reasons.get(key, f'not an argument of {upstream}')}); {valid}")
    return dict(cfg)


def _stage_args(stage_cfgs: Mapping | Sequence[Mapping], dims: Sequence[int], depths: Sequence[int]
                ) -> list[tuple[dict, dict, dict]]:
    """Per stage of widths ``dims`` and ``depths`` blocks, what mmpretrain's ``stage_cfgs`` (and their
    ``block_cfgs``, which override them, as in mmpretrain) set: the window attention's arguments
    (:data:`WINDOW_KEYS`, ``shift``, :data:`WINDOW_MSA_KEYS`), the blocks' (``norm_cfg``, ``ffn_cfg``,
    ``with_cp``, ``drop_path_rates``: this class's ``block_cfgs``) and the patch merging's
    (``downsample_cfgs``). A key without a counterpart raises with the reason (:data:`STAGE_CFG_REASONS`)."""
    args = []
    for i, (cfg, dim, depth) in enumerate(zip(_each(stage_cfgs, len(dims), 'stage_cfgs', 'stage'), dims, depths)):
        where = f'stage_cfgs[{i}].'
        blocks = cfg.get('block_cfgs', {})
        if not isinstance(blocks, Mapping):  # one dict per block: the blocks of a stage share their settings
            if any(dict(b) != dict(blocks[0]) for b in blocks):
                raise ValueError(f'{where}block_cfgs={blocks!r} is not supported (the blocks of a stage '
                                 'share their settings); not implemented: one dict for all its blocks')
            blocks = blocks[0] if blocks else {}
        stage = _mapped(where, cfg, STAGE_KEYS, {}, STAGE_CFG_REASONS, "mmpretrain's SwinBlockSequence")
        block = _mapped(f'{where}block_cfgs.', blocks, BLOCK_KEYS, {}, STAGE_CFG_REASONS, "mmpretrain's SwinBlock")
        attn = _mapped(f'{where}block_cfgs.attn_cfgs.', block.pop('attn_cfgs', {}), WINDOW_MSA_KEYS,
                       dict(qk_scale=(None,)), dict(
                           qk_scale='the window attention scales by head_dim^-1/2', init_cfg=INIT_REASON,
                           window_msa="the window attention is LiSA's own (attention/window.py)",
                           dropout_layer='the residual drops by drop_path_rate',
                           shift_size='block_cfgs.shift sets it', window_size='block_cfgs.window_size sets it',
                           pad_small_map='block_cfgs.pad_small_map sets it'),
                       "mmpretrain's WindowMSA")
        attn.pop('qk_scale', None)
        ffn = _mapped(f'{where}block_cfgs.ffn_cfgs.', block.pop('ffn_cfgs', {}), FFN_KEYS, dict(embed_dims=(dim,)),
                      dict(embed_dims='the FFN keeps the stage width', init_cfg=INIT_REASON), "mmcv's FFN")
        ffn.pop('embed_dims', None)
        if 'ffn_ratio' in block:  # ffn_cfgs' feedforward_channels overrides it, as in mmpretrain
            ffn = {'feedforward_channels': int(dim * block.pop('ffn_ratio')), **ffn}
        geometry = 'the stages halve the grid by 2x2 patches'
        downsample = _mapped(f'{where}downsample_cfg.', stage.pop('downsample_cfg', {}), ('norm_cfg', 'bias'),
                             dict(in_channels=(dim,), out_channels=(2 * dim,), kernel_size=(2,), stride=(None, 2),
                                  padding=('corner',), dilation=(1,)),
                             dict(in_channels='the stage widths double', out_channels='the stage widths double',
                                  kernel_size=geometry, stride=geometry, padding=geometry, dilation=geometry,
                                  init_cfg=INIT_REASON), "mmcv's PatchMerging")
        downsample = {k: v for k, v in downsample.items() if k in ('norm_cfg', 'bias')}
        settings = {**stage, **block}  # a block's settings override its stage's
        attn.update((k, settings[k]) for k in (*WINDOW_KEYS, 'shift') if k in settings)
        blocks_args = {k: settings[k] for k in ('norm_cfg', 'with_cp') if k in settings}
        rates = stage.get('drop_paths')
        if isinstance(rates, Sequence) and len(rates) < depth:  # mmpretrain takes the first depth of them
            raise ValueError(f'{where}drop_paths={rates!r} is not supported (one rate per block of the stage); '
                             f'only a float or a list of at least {depth}')
        if 'drop_path' in block:  # a block's rate overrides its stage's (one for all blocks here)
            rates = block['drop_path']
        if rates is not None:
            blocks_args['drop_path_rates'] = list(rates[:depth]) if isinstance(rates, Sequence) else [rates] * depth
        args.append((attn, blocks_args | ({'ffn_cfg': ffn} if ffn else {}), downsample))
    return args


def from_upstream_swin(kwargs: dict) -> dict:
    """A call in the arguments of an upstream ``SwinTransformer`` as LiSASwinTransformer's.

    mmseg/mmdet: ``embed_dims``, ``depths``, ``num_heads`` (-> ``arch``), ``pretrained``
    (-> ``init_cfg``); ``convert_weights`` has no effect (checkpoints are converted by their
    key layout, :func:`convert_swin_checkpoint`). mmpretrain: ``arch`` as this class's,
    ``img_size`` (-> ``pretrain_img_size``), ``out_indices`` defaulting to ``(3,)``,
    ``norm_cfg`` (-> ``out_norm_cfg``: there it sets only the output norms, the other norms stay
    LayerNorms), ``stage_cfgs`` and their ``block_cfgs`` (one dict for all stages or one per stage, a
    block's keys overriding its stage's; :func:`_stage_args`): ``window_size``, ``pad_small_map``,
    ``shift`` and ``attn_cfgs``' ``qkv_bias`` / ``attn_drop`` / ``proj_drop`` go to the stage's window
    attention; ``norm_cfg``, ``with_cp``, ``drop_paths`` / ``drop_path``, ``ffn_ratio`` and ``ffn_cfgs``
    (mmcv's FFN, the block's there and here) to this class's ``block_cfgs``; ``downsample_cfg``'s
    ``norm_cfg`` / ``bias`` to ``downsample_cfgs``; the other keys are refused with the reason
    (:data:`STAGE_CFG_REASONS`).
    Both: the attention defaults to
    ``dict(type='window', window_size=window_size)`` in every stage; with ``attn_cfgs`` given,
    ``window_size`` goes to its window stages, and raises if there are none (pass
    ``window_size=None``). ``use_abs_pos_embed`` is this class's own argument too (the same
    ``absolute_pos_embed`` table; mmseg and mmdet add it unresized, so there the input must
    have the pretraining grid, where this class resizes it as mmpretrain does). Refused (not
    implemented): ``qk_scale`` other than None (the scale is ``head_dim^-1/2``), ``strides`` other than
    ``(patch_size, 2, 2, ...)``, mmpretrain's ``out_after_downsample=True``, ``patch_cfg``,
    ``interpolate_mode`` other than 'bicubic' (how the absolute position table is resized),
    ``drop_rate > 0`` (there it drops only after the patch embedding, here also in every block),
    ``norm_cfg=None`` (outputs without their norm). No effect, as there: ``norm_eval`` (its
    LayerNorms have no running statistics).

    Which vocabulary: a call naming one of mmseg's / mmdet's own arguments is theirs, one naming
    one of mmpretrain's is mmpretrain's, one naming only ``window_size`` (both have it) is
    mmseg's; any other call (``LiSASwinTransformer()``, or only ``frozen_stages``, ``with_cp``,
    ``use_abs_pos_embed``, ...) is this class's own (LiSA in stages 1-2). ``upstream='mmseg'`` /
    ``'mmdet'`` / ``'mmpretrain'`` names the vocabulary, defaults included
    (``LiSASwinTransformer(upstream='mmpretrain')`` is mmpretrain's Swin-T).

    Maps no larger than the window: with mmseg's / mmdet's arguments the window attention pads
    them to the window and keeps the shift; with mmpretrain's, its ``pad_small_map`` (default
    False) goes to every window stage: False leaves a map whose shorter side is the window
    unshifted and refuses a smaller one (as mmpretrain asserts), True pads as mmseg.
    """
    name = 'LiSASwinTransformer'
    mmseg = one_vocabulary(name, kwargs, "mmseg's/mmdet's SwinTransformer", MMSEG_SWIN_ONLY,
                           ('arch', *MMPRETRAIN_SWIN_ONLY))
    mmpretrain = one_vocabulary(name, kwargs, "mmpretrain's SwinTransformer", MMPRETRAIN_SWIN_ONLY,
                                (*MMPRETRAIN_SWIN_TARGETS, *MMSEG_SWIN_ONLY))
    named = kwargs.get('upstream')
    upstream = named_upstream(name, kwargs, LiSASwinTransformer.UPSTREAMS,
                              MMPRETRAIN_SWIN_TARGETS if named == 'mmpretrain' else ('arch',))
    if upstream is not None:
        other, other_keys = (("mmseg's/mmdet's", MMSEG_SWIN_ONLY) if upstream == 'mmpretrain'
                             else ("mmpretrain's", MMPRETRAIN_SWIN_ONLY))
        if keys := sorted(set(kwargs) & set(other_keys)):
            raise TypeError(f'{name} got upstream={upstream!r} and arguments of {other} SwinTransformer '
                            f'({", ".join(keys)}); use one vocabulary per call')
        mmseg, mmpretrain = upstream != 'mmpretrain', upstream == 'mmpretrain'
    if not (mmseg or mmpretrain or set(kwargs) & set(UPSTREAM_SWIN)):
        return kwargs
    reject_unsupported(name, kwargs, dict(qk_scale=None, out_after_downsample=False, patch_cfg={},
                                          interpolate_mode='bicubic'),
                       dict(interpolate_mode='the absolute position table is resized bicubically',
                            qk_scale='the window attention scales by head_dim^-1/2',
                            out_after_downsample='each stage outputs before its patch merging',
                            patch_cfg='the patch embedding is built from patch_size and patch_norm'))
    for key in ('qk_scale', 'out_after_downsample', 'patch_cfg', 'convert_weights', 'interpolate_mode',
                'norm_eval'):  # the last one: see above
        kwargs.pop(key, None)
    if mmseg:
        arch = {k: kwargs.pop(k, MMSEG_SWIN_ONLY[k]) for k in ('embed_dims', 'depths', 'num_heads')}
        kwargs['arch'] = {**arch, 'depths': list(arch['depths']), 'num_heads': list(arch['num_heads'])}
        strides = kwargs.pop('strides', None)
        if strides is not None and list(strides) != [kwargs.get('patch_size', 4)] + [2] * (len(strides) - 1):
            raise ValueError(f'strides={list(strides)} must be (patch_size, 2, 2, ...): '
                             'other strides of the patch embedding and mergings are not implemented')
        pretrained_to_init_cfg(kwargs)
    arch = LiSASwinTransformer.resolve_arch(kwargs.get('arch', 'tiny'))
    num_stages = len(arch['depths'])
    given = 'window_size' in kwargs
    windows = [kwargs.pop('window_size', UPSTREAM_SWIN['window_size'])] * num_stages
    pad_given = 'pad_small_map' in kwargs
    pad_small_map = kwargs.pop('pad_small_map', MMPRETRAIN_SWIN_ONLY['pad_small_map'])
    if mmpretrain:
        if kwargs.get('drop_rate', 0) > 0:
            raise ValueError(f"{name}: drop_rate={kwargs['drop_rate']} is not supported with mmpretrain's "
                             'arguments (there it drops only after the patch embedding, here also in every block)')
        if 'img_size' in kwargs:
            kwargs['pretrain_img_size'] = kwargs.pop('img_size')
        kwargs.setdefault('out_indices', (3,))
        frozen_stages = kwargs.get('frozen_stages', -1)
        if not -1 <= frozen_stages < num_stages:
            raise ValueError(f"frozen_stages={frozen_stages}: mmpretrain's SwinTransformer counts the stages from 0 "
                             f'(0 freezes the patch embedding and stage 0), so it must be in [-1, {num_stages - 1}]')
        kwargs['frozen_stages'] = frozen_stages + 1 if frozen_stages >= 0 else -1  # this class counts from 1
        if 'norm_cfg' in kwargs:  # mmpretrain's norm_cfg is the output norms'; the others stay LayerNorms
            if kwargs['norm_cfg'] is None:
                raise ValueError(f"{name}: norm_cfg=None is not supported (mmpretrain's outputs without an output "
                                 'norm; every returned stage has its output norm here); only a norm config dict')
            kwargs['out_norm_cfg'] = kwargs.pop('norm_cfg')
        stage_args = _stage_args(kwargs.pop('stage_cfgs', {}), [arch['embed_dims'] * 2 ** i for i in range(num_stages)],
                                 arch['depths'])
        attn_args = [attn for attn, _, _ in stage_args]
        if any('window_size' in a for a in attn_args):  # as in mmpretrain, a stage's window overrides window_size
            windows, given = [a.get('window_size', w) for a, w in zip(attn_args, windows)], True
        if pad_small_map is not None and any('pad_small_map' in a for a in attn_args):
            pad_small_map, pad_given = [a.get('pad_small_map', pad_small_map) for a in attn_args], True
        attn_args = [{k: v for k, v in a.items() if k not in WINDOW_KEYS} for a in attn_args]  # set above
        if any(block for _, block, _ in stage_args):
            kwargs['block_cfgs'] = [block for _, block, _ in stage_args]
        if any(downsample for *_, downsample in stage_args[:-1]):  # the last stage has no patch merging
            kwargs['downsample_cfgs'] = [downsample for *_, downsample in stage_args[:-1]]
    if 'attn_cfgs' not in kwargs:
        kwargs['attn_cfgs'] = [dict(type='window', **({} if w is None else dict(window_size=w))) for w in windows]
    elif windows[0] is not None:
        kwargs['attn_cfgs'] = set_attn_arg(kwargs['attn_cfgs'], num_stages, 'window_size', 'window_size', windows,
                                           'window', given=given)
    kwargs['upstream'] = upstream or ('mmpretrain' if mmpretrain else 'mmseg')
    if mmpretrain and pad_small_map is not None:
        pads = pad_small_map if isinstance(pad_small_map, list) else [pad_small_map] * num_stages
        kwargs['attn_cfgs'] = set_attn_arg(kwargs['attn_cfgs'], num_stages, 'pad_small_map', 'pad_small_map',
                                           pads, 'window', given=pad_given)
    if mmpretrain:
        kwargs['attn_cfgs'] = _set_window_args(kwargs['attn_cfgs'], attn_args)
    return kwargs


def _set_window_args(attn_cfgs: Mapping | Sequence[Mapping], stage_args: Sequence[Mapping]) -> list[dict]:
    """``attn_cfgs`` (one per stage) with the window attention arguments that ``stage_cfgs[i]`` set
    (``shift``, :data:`WINDOW_MSA_KEYS`) in stage ``i``, which must be a window stage not setting them otherwise."""
    cfgs = [dict(c) for c in ([attn_cfgs] * len(stage_args) if isinstance(attn_cfgs, Mapping) else attn_cfgs)]
    for i, (cfg, args) in enumerate(zip(cfgs, stage_args)):
        for key, value in args.items():
            if cfg.get('type') != 'window':
                raise ValueError(f'stage_cfgs[{i}] sets {key}={value!r}, an argument of the window attention; '
                                 f"stage {i} uses {cfg.get('type')!r} (attn_cfgs[{i}]={cfg})")
            if cfg.setdefault(key, value) != value:
                raise ValueError(f'stage_cfgs[{i}] sets {key}={value!r}, which conflicts with attn_cfgs[{i}]={cfg}')
    return cfgs


def _each(cfgs: Mapping | Sequence[Mapping], num: int, name: str, unit: str) -> list[Mapping]:
    """One dict per ``unit`` (``num`` of them) from one dict (all) or a list of ``num``."""
    cfgs = [cfgs] * num if isinstance(cfgs, Mapping) else list(cfgs)
    if len(cfgs) != num:
        raise ValueError(f'{name} has {len(cfgs)} entries; give one dict for all {unit}s or one per {unit} ({num})')
    return cfgs


def _per_stage(cfgs: Mapping | Sequence[Mapping], num: int, name: str, unit: str, keys: Sequence[str]) -> list[dict]:
    """:func:`_each`, each dict with only ``keys``."""
    cfgs = _each(cfgs, num, name, unit)
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
            arguments its numbers mean what they mean there (:func:`from_upstream_swin`): k
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
            'mmseg', 'mmdet' or 'mmpretrain'; set by :func:`from_upstream_swin`. Parts of the
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
        super().__init__(arch, init_cfg)
        if upstream not in self.UPSTREAMS:
            raise ValueError(f'upstream={upstream!r} is not one of {self.UPSTREAMS}')
        self.upstream = upstream
        depths, num_heads = self.arch_settings['depths'], self.arch_settings['num_heads']
        num_stages = self.num_stages
        attn_cfgs = self.check_stage_args(num_stages, out_indices, frozen_stages, attn_cfgs)
        self.num_features = [self.arch_settings['embed_dims'] * 2 ** i for i in range(num_stages)]
        patch_norm_cfg = norm_cfg if patch_norm else None
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
