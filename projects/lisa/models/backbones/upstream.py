"""The arguments of the upstream backbones that the LiSA backbones stand in for, translated to theirs.

A config of mmdet's ``PyramidVisionTransformer``, of mmseg's / mmdet's / mmpretrain's
``SwinTransformer`` or of mmpretrain's ``VisionTransformer`` / ``DistilledVisionTransformer`` with
only its ``type`` changed builds that model: each backbone's ``__init__`` is decorated with
:func:`accepts_upstream_args` and its translator (:func:`from_mmdet_pvt`, :func:`from_upstream_swin`,
:func:`from_mmpretrain_vit`), which returns the call in the backbone's own arguments. The rules all
translators share: one vocabulary per call (:func:`one_vocabulary`, :func:`named_upstream`), an
upstream value not implemented refused with the reason (:func:`reject_unsupported`), ``pretrained``
as ``init_cfg`` (:func:`pretrained_to_init_cfg`), per-stage upstream values set in the attention
configs of the stages they concern (:func:`set_attn_arg`, :func:`set_attn_args`).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from .checks import each


def one_vocabulary(backbone: str, kwargs: Mapping, upstream: str, upstream_keys: Sequence[str],
                   own_keys: Sequence[str]) -> bool:
    """Whether ``kwargs`` speak the ``upstream`` backbone's vocabulary (name one of
    ``upstream_keys``); raise if they also name one of this backbone's own ``own_keys``."""
    theirs, ours = sorted(set(kwargs) & set(upstream_keys)), sorted(set(kwargs) & set(own_keys))
    if theirs and ours:
        raise TypeError(f'{backbone} got arguments of {upstream} ({", ".join(theirs)}) and its own '
                        f'({", ".join(ours)}); use one vocabulary per call')
    return bool(theirs)


def named_upstream(backbone: str, kwargs: Mapping, upstreams: Sequence[str | None], own_keys: Sequence[str]
                   ) -> str | None:
    """The upstream library that ``kwargs`` name with ``upstream=NAME`` (None if they name none):
    one of ``upstreams``, else ValueError; with one of this backbone's ``own_keys``, TypeError.

    A call that fits both vocabularies (no argument only the upstream backbone has) builds this
    backbone's own model; ``upstream=NAME`` makes it the upstream one, defaults included.
    """
    upstream = kwargs.get('upstream')
    if upstream not in upstreams:
        raise ValueError(f'{backbone}: upstream={upstream!r} is not one of {list(upstreams)}')
    ours = sorted(set(kwargs) & set(own_keys))
    if upstream is not None and ours:
        raise TypeError(f'{backbone} got upstream={upstream!r} and its own arguments ({", ".join(ours)}); '
                        'use one vocabulary per call')
    return upstream


def accepts_upstream_args(translate: Callable[[type, dict], dict]) -> Callable:
    """Decorate a backbone's ``__init__`` so that it also takes the arguments of the upstream
    backbone it stands in for: ``translate(cls, kwargs)`` (``cls`` the class built) returns the
    call in this backbone's own arguments (unchanged when it names none of the upstream ones) or
    raises. A call with positional arguments is in the backbone's own vocabulary."""
    def wrap(init: Callable) -> Callable:
        @functools.wraps(init)
        def __init__(self, *args, **kwargs) -> None:
            init(self, *args, **(kwargs if args else translate(type(self), kwargs)))
        return __init__
    return wrap


def set_attn_args(attn_cfgs: Mapping | Sequence[Mapping], num: int, attn_type: str, values: Sequence[Mapping],
                  where: str, given: bool = True, only: Sequence | None = None) -> list[dict]:
    """One attention config per stage with the items of ``values[i]`` set in stage ``i`` where its
    type is ``attn_type``; ``where`` names a value in an error (formatted with ``i``, ``key``, ``value``).

    ``given`` (the caller passed the values): raises if a stage's own config sets another value, or
    if a stage of another type gets a value not in ``only`` (it has no such parameter; ``only=None``:
    not checked). Not ``given`` (upstream defaults): fills the stages that set none.
    """
    cfgs = [dict(c) for c in each(attn_cfgs, num, 'attn_cfgs')]
    for i, (cfg, args) in enumerate(zip(cfgs, values, strict=True)):
        for key, value in args.items():
            name = where.format(i=i, key=key, value=value)
            if cfg.get('type') == attn_type:
                if cfg.setdefault(key, value) != value and given:
                    raise ValueError(f'{name} conflicts with attn_cfgs[{i}]={cfg}')
            elif given and only is not None and value not in only:
                raise ValueError(f'{name}: stage {i} uses the {cfg.get("type")!r} attention, which has no {key}'
                                 + (f' (only {only[0]!r} is meaningful there)' if only else ''))
    return cfgs


def set_attn_arg(attn_cfgs: Mapping | Sequence[Mapping], num: int, arg: str, key: str, values: Sequence,
                 attn_type: str, neutral: object = None, given: bool = True) -> list[dict]:
    """:func:`set_attn_args` for the upstream argument ``arg``, one value per stage, which sets ``key``
    of the ``attn_type`` stages; a stage of another type may get only ``neutral`` (None: anything).

    ``given`` (the caller passed ``arg``): also raises if no stage is of ``attn_type`` (the argument
    would configure nothing). Not ``given`` (the upstream default): fills the stages that set none.
    """
    cfgs = [dict(c) for c in each(attn_cfgs, num, 'attn_cfgs')]
    if len(values) != num:
        raise ValueError(f'{arg}={list(values)} needs one entry per stage ({num})')
    if given and not any(c.get('type') == attn_type for c in cfgs):
        raise ValueError(f'{arg}={list(values)} configures the {attn_type!r} attention, which no stage uses '
                         f'(attn_cfgs={cfgs}); pass {arg}=None')
    return set_attn_args(cfgs, num, attn_type, [{key: v} for v in values], arg + '[{i}]={value!r}', given,
                         None if neutral is None else (neutral,))


def reject_unsupported(backbone: str, kwargs: Mapping, supported: Mapping[str, object], reason: Mapping[str, str]
                       ) -> None:
    """Raise for an upstream argument whose value this backbone does not implement:
    ``supported[name]`` is the one value it takes, ``reason[name]`` says why."""
    for name, value in supported.items():
        if name in kwargs and kwargs[name] != value:
            raise ValueError(f'{backbone}: {name}={kwargs[name]!r} is not supported ({reason[name]}); '
                             f'only {name}={value!r}')


def pretrained_to_init_cfg(kwargs: dict) -> None:
    """mmdet's / mmseg's ways to name a checkpoint as this backbone's ``init_cfg``: the deprecated
    ``pretrained=PATH``, and ``init_cfg=dict(checkpoint=PATH)`` without a type (both Pretrained)."""
    pretrained, init_cfg = kwargs.pop('pretrained', None), kwargs.get('init_cfg')
    if pretrained is not None:
        if not isinstance(pretrained, str) or init_cfg is not None:
            raise TypeError(f'pretrained={pretrained!r} must be a path and cannot be given with init_cfg')
        kwargs['init_cfg'] = dict(type='Pretrained', checkpoint=pretrained)
    elif isinstance(init_cfg, Mapping) and 'checkpoint' in init_cfg and 'type' not in init_cfg:
        kwargs['init_cfg'] = dict(type='Pretrained', **init_cfg)


# ---------------------------------------------------------------- PVT (mmdet)

# mmdet 3.3 PyramidVisionTransformer: its arguments that LiSAPVT does not share, with their defaults
MMDET_PVT_ONLY = dict(embed_dims=64, num_stages=4, num_layers=[3, 4, 6, 3], num_heads=[1, 2, 5, 8], strides=None,
                      sr_ratios=[8, 4, 2, 1], mlp_ratios=[8, 8, 4, 4], use_abs_pos_embed=True, norm_after_stage=False,
                      use_conv_ffn=False, pretrained=None, convert_weights=True)


def from_mmdet_pvt(cls: type, kwargs: dict) -> dict:
    """A call in mmdet ``PyramidVisionTransformer``'s arguments as LiSAPVT's (others unchanged).

    Same meaning: stage ``i`` has ``embed_dims * num_heads[i]`` channels, ``num_layers[i]``
    blocks, FFN ``mlp_ratios[i]`` times wider; ``paddings`` (default 0: a patch embedding
    floors ``H / patch``, as mmdet's) and ``pretrained`` (-> ``init_cfg``) as there. The
    attention defaults to mmdet's, ``dict(type='softmax', sr_ratio=sr_ratios[i])``; with
    ``attn_cfgs`` given, ``sr_ratios`` goes to its softmax stages and must be 1 (or None)
    at the others (no spatial reduction there); without ``sr_ratios``, mmdet's default ratios go to
    the softmax stages of ``attn_cfgs`` that set none. ``convert_weights`` has no effect: checkpoints
    are converted by their key layout (:func:`.pvt.convert_pvt_checkpoint`). Not implemented, so
    refused: ``strides`` other than ``patch_sizes`` (overlapping embeddings),
    ``use_abs_pos_embed=False``, ``norm_after_stage``, ``use_conv_ffn`` (PVT v2's parts).

    A call with none of mmdet's own arguments (``LiSAPVT()``, or only ``frozen_stages``,
    ``pretrain_img_size``, ...) is this class's (LiSA-PVT-T); ``upstream='mmdet'`` makes it
    mmdet's, its defaults included (``LiSAPVT(upstream='mmdet')`` is mmdet's PVT-Small).
    """
    name = cls.__name__
    named = named_upstream(name, kwargs, cls.UPSTREAMS, ('arch',))
    if not (one_vocabulary(name, kwargs, "mmdet's PyramidVisionTransformer", MMDET_PVT_ONLY, ('arch',))
            or named):
        return kwargs
    kwargs = {**{k: v for k, v in MMDET_PVT_ONLY.items() if k != 'sr_ratios'}, **kwargs}
    reject_unsupported(name, kwargs, dict(use_abs_pos_embed=True, norm_after_stage=False, use_conv_ffn=False),
                       dict(use_abs_pos_embed='every stage has a position embedding',
                            norm_after_stage="PVT v1 has no stage norm (PVT v2's)",
                            use_conv_ffn="PVT v1's FFN is linear (the convolutional one is PVT v2's)"))
    patch_sizes = list(kwargs.setdefault('patch_sizes', [4, 2, 2, 2]))
    strides = kwargs.pop('strides')
    if strides is not None and list(strides) != patch_sizes:
        raise ValueError(f'strides={list(strides)} must equal patch_sizes={patch_sizes}: '
                         'overlapping patch embeddings (PVT v2) are not implemented')
    embed_dims, num_stages, heads = kwargs.pop('embed_dims'), kwargs.pop('num_stages'), list(kwargs.pop('num_heads'))
    arch = dict(embed_dims=[embed_dims * h for h in heads], depths=list(kwargs.pop('num_layers')),
                num_heads=heads, mlp_ratios=list(kwargs.pop('mlp_ratios')))
    if any(len(v) != num_stages for v in arch.values()):
        raise ValueError(f'num_stages={num_stages} but num_layers, num_heads, mlp_ratios have lengths '
                         f'{[len(v) for v in arch.values()]}')
    kwargs['arch'] = arch
    kwargs.setdefault('paddings', [0] * num_stages)
    for name in ('use_abs_pos_embed', 'norm_after_stage', 'use_conv_ffn', 'convert_weights'):
        kwargs.pop(name)
    pretrained_to_init_cfg(kwargs)
    given = 'sr_ratios' in kwargs
    sr_ratios = kwargs.pop('sr_ratios', MMDET_PVT_ONLY['sr_ratios'])
    attn_cfgs = kwargs.get('attn_cfgs', dict(type='softmax'))
    if sr_ratios is not None:
        attn_cfgs = set_attn_arg(attn_cfgs, num_stages, 'sr_ratios', 'sr_ratio', sr_ratios, 'softmax', neutral=1,
                                 given=given)
    kwargs['attn_cfgs'] = attn_cfgs
    kwargs['upstream'] = 'mmdet'
    return kwargs


# ---------------------------------------------------------------- Swin (mmseg, mmdet, mmpretrain)

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
    for i, (cfg, dim, depth) in enumerate(zip(each(stage_cfgs, len(dims), 'stage_cfgs'), dims, depths)):
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


def from_upstream_swin(cls: type, kwargs: dict) -> dict:
    """A call in the arguments of an upstream ``SwinTransformer`` as LiSASwinTransformer's.

    mmseg/mmdet: ``embed_dims``, ``depths``, ``num_heads`` (-> ``arch``), ``pretrained``
    (-> ``init_cfg``); ``convert_weights`` has no effect (checkpoints are converted by their
    key layout, :func:`.swin.convert_swin_checkpoint`). mmpretrain: ``arch`` as this class's,
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
    name = cls.__name__
    mmseg = one_vocabulary(name, kwargs, "mmseg's/mmdet's SwinTransformer", MMSEG_SWIN_ONLY,
                           ('arch', *MMPRETRAIN_SWIN_ONLY))
    mmpretrain = one_vocabulary(name, kwargs, "mmpretrain's SwinTransformer", MMPRETRAIN_SWIN_ONLY,
                                (*MMPRETRAIN_SWIN_TARGETS, *MMSEG_SWIN_ONLY))
    named = kwargs.get('upstream')
    upstream = named_upstream(name, kwargs, cls.UPSTREAMS,
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
    arch = cls.resolve_arch(kwargs.get('arch', 'tiny'))
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
        kwargs['attn_cfgs'] = set_attn_args(kwargs['attn_cfgs'], num_stages, 'window', attn_args,
                                            'stage_cfgs[{i}].{key}={value!r}', only=())
    return kwargs


# ---------------------------------------------------------------- ViT, DeiT (mmpretrain)

# mmpretrain 1.2 VisionTransformer: its arguments that LiSAViT does not share, with their defaults
MMPRETRAIN_VIT_ONLY = dict(img_size=224, interpolate_mode='bicubic', layer_scale_init_value=0.0, patch_cfg={},
                           layer_cfgs={}, pre_norm=False)


def from_mmpretrain_vit(cls: type, kwargs: dict) -> dict:
    """A call in mmpretrain ``VisionTransformer``'s arguments as LiSAViT's (others unchanged);
    for ``cls.distilled``, in ``DistilledVisionTransformer``'s as :class:`.vit.LiSADistilledViT`'s.

    Same meaning: ``arch`` a preset of mmpretrain's ``VisionTransformer.arch_zoo`` (its
    'small' is ViT-S, 768 channels, 8 layers, not this class's DeiT-S) or the same custom
    dict, ``img_size`` (-> ``pretrain_img_size``), mmpretrain's defaults (``arch='base'``,
    ``drop_path_rate=0``), softmax attention in every layer unless ``attn_cfgs`` is given.
    Refused (not implemented): ``layer_scale_init_value`` other than 0, ``pre_norm=True``
    (CLIP), non-empty ``patch_cfg`` / ``layer_cfgs``, ``interpolate_mode`` other than
    'bicubic' (how the position tables are resized). ``DistilledVisionTransformer`` takes the
    same arguments (its default ``arch='deit-base'``, the same model). ``frozen_stages`` as there:
    0 freezes nothing (this class's 0 freezes the embeddings), ``k > 0`` the embeddings (not the
    distillation token) and layers 1..k.

    A call with none of mmpretrain's own arguments (``LiSAViT()``, ``LiSAViT(arch='deit-tiny')``,
    or only ``frozen_stages``, ``with_cp``, ...) is this class's (LiSA in every layer, DeiT-T by
    default); ``upstream='mmpretrain'`` makes it mmpretrain's, its defaults included
    (``LiSAViT(upstream='mmpretrain')`` is its softmax ViT-B).
    """
    backbone, distilled = cls.__name__, cls.distilled
    upstream = 'DistilledVisionTransformer' if distilled else 'VisionTransformer'
    named = named_upstream(backbone, kwargs, cls.UPSTREAMS, ('pretrain_img_size',))
    if not (one_vocabulary(backbone, kwargs, f"mmpretrain's {upstream}", MMPRETRAIN_VIT_ONLY,
                           ('pretrain_img_size',)) or named):
        return kwargs
    reject_unsupported(backbone, kwargs, {k: v for k, v in MMPRETRAIN_VIT_ONLY.items() if k != 'img_size'},
                       dict(interpolate_mode='position tables are resized bicubically',
                            layer_scale_init_value='the layers have no layer scale',
                            patch_cfg='the patch embedding is built from patch_size',
                            layer_cfgs='the layers are built from the backbone arguments',
                            pre_norm="no norm before the first layer (CLIP's)"))
    for key in MMPRETRAIN_VIT_ONLY:
        if key != 'img_size':
            kwargs.pop(key, None)
    kwargs['pretrain_img_size'] = kwargs.pop('img_size', MMPRETRAIN_VIT_ONLY['img_size'])
    arch = kwargs.pop('arch', 'deit-base' if distilled else 'base')
    if isinstance(arch, str):
        from mmpretrain.models.backbones import VisionTransformer
        if arch.lower() not in VisionTransformer.arch_zoo:
            raise ValueError(f"arch={arch!r} is not one of mmpretrain's VisionTransformer presets "
                             f'{sorted(VisionTransformer.arch_zoo)}')
        arch = dict(VisionTransformer.arch_zoo[arch.lower()])
    kwargs['arch'] = arch
    kwargs.setdefault('drop_path_rate', 0.0)
    kwargs.setdefault('attn_cfgs', dict(type='softmax'))
    if kwargs.get('frozen_stages') == 0:  # mmpretrain freezes only for frozen_stages > 0
        kwargs['frozen_stages'] = -1
    kwargs['upstream'] = 'mmpretrain'
    return kwargs
