"""The LiSA backbones as drop-ins for the ones of mmdet, mmseg and mmpretrain.

A config shipped in one of these packages whose backbone is mmdet's ``PyramidVisionTransformer``,
mmseg's / mmdet's / mmpretrain's ``SwinTransformer`` or mmpretrain's ``VisionTransformer`` /
``DistilledVisionTransformer``, with only the backbone's ``type`` changed (and ``init_cfg``,
``pretrained`` dropped: they would download), builds the upstream model: it loads the upstream
model's random-initialised state dict and computes its outputs on a small odd-sized input;
``attn_cfgs`` with LiSA on top builds and gives the same output shapes. A config whose backbone
asks for a part LiSA's backbones do not implement is refused with an error naming the argument.
The upstream model is built from the config's own arguments, none substituted.
"""
from __future__ import annotations

import copy
import importlib
import multiprocessing
import re
import resource
import time
from pathlib import Path

import mmengine
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.backbones import LiSADistilledViT, LiSAPVT, LiSASwinTransformer, LiSAViT

SITE = Path(mmengine.__file__).parents[1]
CONFIGS = {pkg: SITE / pkg / '.mim' / 'configs' for pkg in ('mmdet', 'mmseg', 'mmpretrain')}
DROPIN = {  # (package of the upstream class, its name) -> the LiSA backbone standing in for it
    ('mmdet', 'PyramidVisionTransformer'): LiSAPVT,
    ('mmdet', 'SwinTransformer'): LiSASwinTransformer,
    ('mmseg', 'SwinTransformer'): LiSASwinTransformer,
    ('mmpretrain', 'SwinTransformer'): LiSASwinTransformer,
    ('mmpretrain', 'VisionTransformer'): LiSAViT,
    ('mmpretrain', 'DistilledVisionTransformer'): LiSADistilledViT,
}
# odd sizes: mmdet's PVT floors them (33 -> 8 at stride 4), Swin pads them (33 -> 9)
INPUT = {LiSAPVT: (33, 47), LiSASwinTransformer: (33, 47), LiSAViT: (35, 50), LiSADistilledViT: (35, 50)}
REFUSED = re.compile(r'is not supported|not implemented')


def upstream_of(package: str, backbone: dict) -> tuple[str, str] | None:
    """(package, class name) of a config's backbone if a LiSA backbone stands in for it."""
    scope, _, name = str(backbone.get('type', '')).rpartition('.')
    key = (scope or package, name)
    return key if key in DROPIN else None


def lisa_on(cls: type, args: dict) -> dict:
    """LiSA where the class's own default puts it: every stage (PVT) or layer (ViT); Swin's
    first two stages, the window attention kept where the config's window sizes apply."""
    if cls is LiSASwinTransformer:
        num_stages = len(args.get('depths', [0] * 4))
        return dict(attn_cfgs=[dict(type='lisa')] * 2 + [dict(type='window')] * (num_stages - 2))
    return dict(attn_cfgs=dict(type='lisa'))


def input_size(key: tuple[str, str], args: dict) -> tuple[int, int]:
    """The input the comparison runs at: :data:`INPUT`, but for mmpretrain's Swin without
    ``pad_small_map``, which refuses maps smaller than the window, the smallest size whose last
    stage has the window's side (the case where it leaves the window unshifted), and 9 px wider."""
    cls = DROPIN[key]
    if key != ('mmpretrain', 'SwinTransformer') or args.get('pad_small_map', False):
        return INPUT[cls]
    num_stages = len(cls.resolve_arch(args.get('arch', 'tiny'))['depths'])
    stage_cfgs = args.get('stage_cfgs', {})
    stage_cfgs = [stage_cfgs] * num_stages if isinstance(stage_cfgs, dict) else stage_cfgs
    windows = [c.get('block_cfgs', {}).get('window_size', c.get('window_size', args.get('window_size', 7)))
               for c in stage_cfgs]
    side = max(w * args.get('patch_size', 4) * 2 ** i for i, w in enumerate(windows))
    return side, side + 9


def flat(outs: tuple) -> list[torch.Tensor]:
    """A backbone's outputs, each out index's tuple (DeiT's ``(cls, dist)`` tokens) spread out."""
    return [t for o in outs for t in (o if isinstance(o, tuple) else (o,))]


def check_dropin(package: str, backbone: dict) -> str:
    """Build, load, compare one backbone dict; 'equal' or 'refused: ...'."""
    key = upstream_of(package, backbone)
    cls = DROPIN[key]
    args = {k: v for k, v in copy.deepcopy(backbone).items() if k not in ('type', 'init_cfg', 'pretrained')}
    torch.manual_seed(0)
    try:
        ours = cls(**copy.deepcopy(args)).eval()
    except ValueError as e:
        assert REFUSED.search(str(e)), e
        return f'refused: {e}'
    registry = importlib.import_module(f'{key[0]}.registry').MODELS
    with DefaultScope.overwrite_default_scope(key[0]):  # build looks in the default scope's registry first
        reference = registry.build(dict(type=key[1], **copy.deepcopy(args)))
    reference.init_weights()
    reference.eval()
    x = torch.randn(1, args.get('in_channels', 3), *input_size(key, args))
    missing, unexpected = ours.load_state_dict(reference.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {name for name, _ in ours.named_buffers()}, (missing, unexpected)
    with torch.no_grad():
        got, want = ours(x), reference(x)
        del ours, reference  # two models at a time: ViT-H has 632M parameters
        with_lisa = cls(**copy.deepcopy(args), **lisa_on(cls, args)).eval()(x)
    assert [type(o) for o in got] == [type(o) for o in want] == [type(o) for o in with_lisa]  # DeiT: pairs
    got, want, with_lisa = flat(got), flat(want), flat(with_lisa)
    assert len(got) == len(want) == len(with_lisa)
    for a, b, c in zip(got, want, with_lisa):
        # float32 rounding grows with depth and activations (PVT-L: 35 blocks, |out| up to ~10)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * max(1.0, b.abs().max().item()))
        assert c.shape == b.shape
    return 'equal'


def dict_key(backbone: dict) -> str:
    return repr(sorted((k, v) for k, v in backbone.items() if k not in ('init_cfg', 'pretrained')))


@pytest.mark.parametrize('package, config, outcome', [
    ('mmdet', 'pvt/retinanet_pvt-t_fpn_1x_coco.py', 'equal'),
    ('mmdet', 'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py', 'equal'),
    ('mmseg', 'swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py', 'equal'),
    ('mmpretrain', 'swin_transformer/swin-tiny_16xb64_in1k.py', 'equal'),
    ('mmpretrain', 'deit/deit-tiny_4xb256_in1k.py', 'equal'),
    ('mmpretrain', 'deit/deit-tiny-distilled_4xb256_in1k.py', 'equal'),
])
def test_representative_configs_build_the_upstream_model_with_only_the_type_swapped(
        seed_and_one_thread, package, config, outcome):
    backbone = Config.fromfile(CONFIGS[package] / config).model.backbone.to_dict()
    assert upstream_of(package, backbone)
    assert check_dropin(package, backbone) == outcome


def shipped_configs(package: str) -> list[Path]:
    """The package's configs that name one of the upstream types or inherit (``_base_``, by
    relative path) from one that does: a cheap superset of those whose backbone is one."""
    files = sorted(f.resolve() for f in CONFIGS[package].rglob('*.py'))  # as the _base_ paths below (a linked venv)
    texts = {f: f.read_text() for f in files}
    names = '|'.join(sorted({name for _, name in DROPIN}))
    marked = {f for f, t in texts.items() if re.search(rf"['\"](\w+\.)?({names})['\"]", t)}
    bases = {f: {(f.parent / p).resolve() for p in re.findall(r"['\"]([^'\"\s]+\.py)['\"]", t)}
             for f, t in texts.items()}
    while grown := {f for f in files if f not in marked and bases[f] & marked}:
        marked |= grown
    return sorted(marked)


def measured(fn, *args):
    """``fn(*args)`` and the peak memory (GiB) of the process that computed it."""
    return fn(*args), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def in_child(fn, *args):
    """``measured(fn, *args)`` in a forked process (its exception re-raised here): the memory of
    the models it builds goes back to the system when it exits, instead of growing one process's heap."""
    with multiprocessing.get_context('fork').Pool(1) as pool:
        return pool.apply(measured, (fn, *args))


@pytest.mark.slow
def test_every_shipped_config_builds_the_upstream_model_with_only_the_type_swapped(seed_and_one_thread, capsys):
    """The walk over every config of the installed mmdet, mmseg and mmpretrain (193 configs,
    79 distinct backbone dicts, up to ViT-H; minutes): only it catches an argument, a preset or a
    combination that the six representative configs do not use (Swin-L, 5-stage Swin,
    mmpretrain's stage_cfgs windows, ViT presets, out types, refused CLIP / DINOv2 parts).
    Each backbone is checked in a process of its own: in one process the heap grew past 23.9 GB
    (glibc keeps what ViT-H's models freed), which a 24 GiB machine like CI's cannot hold."""
    start, found, outcomes, done, peak = time.monotonic(), 0, {}, {}, 0.0
    for package in CONFIGS:
        for path in shipped_configs(package):
            try:
                model = Config.fromfile(path).get('model')
            except Exception:  # noqa: BLE001  (configs that need packages not installed here)
                continue
            backbone = model.get('backbone') if isinstance(model, dict) else None
            if not isinstance(backbone, dict) or not upstream_of(package, backbone):
                continue
            found += 1
            backbone = backbone.to_dict()
            key = (package, dict_key(backbone))
            if key not in done:
                try:
                    done[key], memory = in_child(check_dropin, package, backbone)
                    peak = max(peak, memory)
                except Exception as e:  # noqa: BLE001  (collected, reported below)
                    done[key] = f'failed: {path.name}: {type(e).__name__}: {str(e)[:300]}'
            outcome = done[key].split(':')[0]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    with capsys.disabled():
        print(f'\nupstream configs found {found}, distinct backbones {len(done)}, configs by outcome {outcomes} '
              f'({time.monotonic() - start:.0f} s, largest process {peak:.1f} GiB)')
        for reason in sorted({v for v in done.values() if not v.startswith('equal')}):
            print(' ', reason)
    assert found > 150 and 'failed' not in outcomes


# ---------------------------------------------------------------- the two vocabularies


@pytest.mark.parametrize('cls, kwargs, match', [
    (LiSAPVT, dict(arch='tiny', num_layers=[2, 2, 2, 2]),
     r"LiSAPVT got arguments of mmdet's PyramidVisionTransformer \(num_layers\) and its own \(arch\)"),
    (LiSASwinTransformer, dict(arch='tiny', embed_dims=96),
     r"mmseg's/mmdet's SwinTransformer \(embed_dims\) and its own \(arch\)"),
    (LiSASwinTransformer, dict(img_size=224, pretrain_img_size=224),
     r"mmpretrain's SwinTransformer \(img_size\) and its own \(pretrain_img_size\)"),
    (LiSAViT, dict(img_size=224, pretrain_img_size=224),
     r"mmpretrain's VisionTransformer \(img_size\) and its own \(pretrain_img_size\)"),
])
def test_one_vocabulary_per_call_else_an_error_names_both_sides(cls, kwargs, match):
    with pytest.raises(TypeError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize('cls, kwargs, match', [
    # sr_ratios: the spatial reduction of softmax stages; a ratio > 1 at a LiSA stage means nothing
    (LiSAPVT, dict(num_layers=[1] * 4, sr_ratios=[8, 4, 2, 1], attn_cfgs=dict(type='lisa')),
     r"sr_ratios=\[8, 4, 2, 1\] configures the 'softmax' attention, which no stage uses .* sr_ratios=None"),
    (LiSAPVT, dict(num_layers=[1] * 4, sr_ratios=[8, 4, 2, 1],
                   attn_cfgs=[dict(type='softmax')] + [dict(type='lisa')] * 3),
     r"sr_ratios\[1\]=4: stage 1 uses the 'lisa' attention, which has no sr_ratio"),
    (LiSAPVT, dict(num_layers=[1] * 4, sr_ratios=[8, 4, 2, 1], attn_cfgs=dict(type='softmax', sr_ratio=4)),
     r'sr_ratios\[0\]=8 conflicts with attn_cfgs\[0\]'),
    # window_size: the window of the window stages; with none of them it would configure nothing
    (LiSASwinTransformer, dict(embed_dims=96, window_size=7, attn_cfgs=dict(type='lisa')),
     r"window_size=\[7, 7, 7, 7\] configures the 'window' attention, which no stage uses .* window_size=None"),
    (LiSAPVT, dict(num_layers=[1] * 4, strides=[4, 4, 2, 2]), r'strides=\[4, 4, 2, 2\] must equal patch_sizes'),
    (LiSAPVT, dict(num_layers=[1] * 4, use_conv_ffn=True), r'use_conv_ffn=True is not supported'),
    (LiSASwinTransformer, dict(arch='tiny', img_size=224, interpolate_mode='bilinear'),
     r"interpolate_mode='bilinear' is not supported"),
    (LiSASwinTransformer, dict(embed_dims=96, qk_scale=0.1), r'qk_scale=0.1 is not supported'),
    (LiSASwinTransformer, dict(arch='tiny', img_size=224, drop_rate=0.1), r'drop_rate=0.1 is not supported'),
    (LiSAViT, dict(arch='deit-tiny', img_size=224, pre_norm=True), r'pre_norm=True is not supported'),
    (LiSAViT, dict(arch='deit-tiny', img_size=224, layer_scale_init_value=0.1),
     r'layer_scale_init_value=0.1 is not supported'),
])
def test_arguments_that_mean_nothing_for_the_chosen_parts_raise_with_the_reason(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_mmdet_arguments_floor_odd_sizes_as_mmdet_and_own_arguments_keep_every_pixel(seed_and_one_thread):
    x = torch.randn(1, 3, 33, 47)
    tiny = dict(embed_dims=8, num_heads=[1, 1, 1, 1], num_layers=[1] * 4, mlp_ratios=[2] * 4)
    floored = [o.shape[-2:] for o in LiSAPVT(**tiny)(x)]
    arch = dict(embed_dims=[8] * 4, depths=[1] * 4, num_heads=[1] * 4, mlp_ratios=[2] * 4)
    padded = [o.shape[-2:] for o in LiSAPVT(arch=arch, attn_cfgs=dict(type='softmax'))(x)]
    strides = [4, 8, 16, 32]
    assert floored == [(33 // s, 47 // s) for s in strides]
    assert padded == [(-(-33 // s), -(-47 // s)) for s in strides]


def test_swapped_configs_default_to_the_upstream_attention_and_take_lisa_by_attn_cfgs():
    pvt = LiSAPVT(num_layers=[1] * 4)
    assert [(b.attn.__class__.__name__, b.attn.sr_ratio) for s in pvt.stages for b in s.blocks] == [
        ('SoftmaxAttention', r) for r in (8, 4, 2, 1)]
    lisa = LiSAPVT(num_layers=[1] * 4, attn_cfgs=dict(type='lisa'))
    assert {type(b.attn).__name__ for s in lisa.stages for b in s.blocks} == {'LiSAAttention'}
    swin = LiSASwinTransformer(arch='tiny', img_size=224, stage_cfgs=dict(block_cfgs=dict(window_size=6)))
    assert {b.attn.window_size for s in swin.stages for b in s.blocks} == {6} and swin.out_indices == (3,)


def test_upstream_ways_to_name_a_checkpoint_become_the_checked_pretrained_init_cfg():
    assert LiSAPVT(num_layers=[1] * 4, init_cfg=dict(checkpoint='pvt_tiny.pth')).init_cfg == dict(
        type='Pretrained', checkpoint='pvt_tiny.pth')
    assert LiSASwinTransformer(depths=[1, 1, 1, 1], pretrained='swin.pth').init_cfg == dict(
        type='Pretrained', checkpoint='swin.pth')
    with pytest.raises(TypeError, match="pretrained='a.pth' must be a path and cannot be given with init_cfg"):
        LiSAPVT(num_layers=[1] * 4, pretrained='a.pth', init_cfg=dict(type='Pretrained', checkpoint='b.pth'))
