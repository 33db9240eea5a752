"""With only ``type`` changed, the upstream backbones' own expectations hold, part by part.

Each test builds the upstream backbone and the LiSA one from the same arguments (the upstream
vocabulary), and compares what the upstream library promises for that argument: the outputs
given the same weights, the trainable parameters of each ``frozen_stages``, the state dict,
the default model. The walk over every shipped config is ``test_upstream_dropin.py``.
"""
from __future__ import annotations

import importlib

import pytest
import torch
from mmengine.registry import DefaultScope

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.backbones import LiSADistilledViT, LiSAPVT, LiSASwinTransformer, LiSAViT

mmpretrain_backbones = pytest.importorskip('mmpretrain.models.backbones')

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')

SWIN = dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` initialised, every parameter moved off its init value (so a misplaced weight shows),
    in eval mode (some upstream ``train()`` return None)."""
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    return model


def flat(outs: tuple) -> list[torch.Tensor]:
    """A backbone's outputs, each out index's tuple (DeiT's ``(cls, dist)`` tokens) spread out."""
    return [t for o in outs for t in (o if isinstance(o, tuple) else (o,))]


def assert_same_outputs(ours: torch.nn.Module, reference: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        got, want = ours(x), reference(x)
    assert [len(o) if isinstance(o, tuple) else 1 for o in got] == [
        len(o) if isinstance(o, tuple) else 1 for o in want]
    for a, b in zip(flat(got), flat(want)):
        # float32 rounding grows with depth and activations (as in the walk)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * max(1.0, b.abs().max().item()))


# ---------------------------------------------------------------- 1. mmpretrain Swin's pad_small_map


@pytest.mark.parametrize('pad_small_map', [None, False, True])  # None: not given, mmpretrain's default (False)
@pytest.mark.parametrize('size', [(224, 224), (224, 233)])     # stage 4: 7 x 7, 7 x 8 (min side = window)
def test_mmpretrain_swin_pad_small_map_as_given_or_its_default_gives_mmpretrain_outputs(pad_small_map, size):
    kwargs = dict(arch=SWIN, img_size=224, out_indices=(0, 1, 2, 3))
    if pad_small_map is not None:
        kwargs['pad_small_map'] = pad_small_map
    reference = perturbed(mmpretrain_backbones.SwinTransformer(**kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, *size))


def test_mmpretrain_swin_without_pad_small_map_refuses_a_map_smaller_than_the_window_as_mmpretrain_does():
    kwargs = dict(arch=SWIN, img_size=224, pad_small_map=False)
    x = torch.randn(1, 3, 190, 190)  # stage 4: 6 x 6 < window 7
    with pytest.raises(AssertionError, match='pad_small_map'):
        mmpretrain_backbones.SwinTransformer(**kwargs)(x)
    with pytest.raises(ValueError, match=r'6x6 map .*window_size=7.*pad_small_map=False'):
        LiSASwinTransformer(**kwargs).eval()(x)
    assert LiSASwinTransformer(**dict(kwargs, pad_small_map=True))(x)[0].shape == (1, 64, 6, 6)


# ---------------------------------------------------------------- 3. frozen_stages in each vocabulary


def upstream_swin(package: str, **kwargs) -> torch.nn.Module:
    module = importlib.import_module(f'{package}.models.backbones.' + ('swin_transformer' if package == 'mmpretrain'
                                                                        else 'swin'))
    return module.SwinTransformer(**kwargs)


def trainable_and_modes(model: torch.nn.Module, convert) -> tuple[set[str], dict[str, bool]]:
    """After ``train()``: the parameters that train (named in LiSA's keys by ``convert``) and the
    mode of every LayerNorm (what ``norm_eval`` and the freezing leave in training mode)."""
    model.train()
    names = {n: n for n, _ in model.named_parameters()}
    renamed = dict(zip(names, convert(names)))  # the converters rename keys one by one, in order
    trainable = {renamed[n] for n, p in model.named_parameters() if p.requires_grad}
    modes = {renamed[f'{n}.weight']: m.training for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    return trainable, modes


SWIN_VOCABULARIES = [  # (package, its arguments for a small Swin, its largest frozen_stages)
    ('mmseg', dict(embed_dims=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), 4),
    ('mmdet', dict(embed_dims=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), 4),
    ('mmpretrain', dict(arch=dict(embed_dims=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2]), img_size=224,
                        out_indices=(0, 1, 2, 3)), 3),
]


@pytest.mark.parametrize('norm_eval', [False, True])
@pytest.mark.parametrize('package, kwargs, largest', SWIN_VOCABULARIES)
def test_swin_frozen_stages_freezes_what_it_freezes_upstream_for_every_value(package, kwargs, largest, norm_eval):
    from projects.lisa.models.backbones.swin import convert_swin_checkpoint
    if package == 'mmpretrain':
        kwargs = dict(kwargs, norm_eval=norm_eval)
    elif norm_eval:
        pytest.skip("mmseg's / mmdet's Swin has no norm_eval")
    for frozen_stages in range(-1, largest + 1):
        reference = upstream_swin(package, **kwargs, frozen_stages=frozen_stages)
        ours = LiSASwinTransformer(**kwargs, frozen_stages=frozen_stages)
        assert trainable_and_modes(ours, list) == trainable_and_modes(reference, convert_swin_checkpoint), (
            package, frozen_stages)


def test_mmpretrain_swin_frozen_stages_beyond_the_last_stage_is_refused_naming_its_range():
    with pytest.raises(ValueError, match=r"frozen_stages=4: mmpretrain's .*\[-1, 3\]"):
        LiSASwinTransformer(**SWIN_VOCABULARIES[2][1], frozen_stages=4)


VIT = dict(arch=dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64), img_size=32, patch_size=8)


@pytest.mark.parametrize('out_type', ['cls_token', 'avg_featmap'])
def test_vit_frozen_stages_freezes_what_mmpretrain_freezes_for_every_value(out_type):
    from projects.lisa.models.backbones.vit import convert_vit_checkpoint
    for frozen_stages in range(-1, 4):
        reference = mmpretrain_backbones.VisionTransformer(**VIT, out_type=out_type, frozen_stages=frozen_stages)
        ours = LiSAViT(**VIT, out_type=out_type, frozen_stages=frozen_stages)
        assert trainable_and_modes(ours, list)[0] == trainable_and_modes(reference, convert_vit_checkpoint)[0], (
            frozen_stages)


# ---------------------------------------------------------------- 2. Swin's absolute position embedding

SMALL_SWIN = dict(embed_dims=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2])


@pytest.mark.parametrize('package, kwargs, size', [
    ('mmseg', dict(SMALL_SWIN, use_abs_pos_embed=True), (224, 224)),  # mmseg adds the table unresized
    ('mmdet', dict(SMALL_SWIN, use_abs_pos_embed=True), (224, 224)),
    ('mmpretrain', dict(arch=SMALL_SWIN, img_size=224, use_abs_pos_embed=True, out_indices=(0, 1, 2, 3)), (224, 233)),
])
def test_swin_with_absolute_position_embedding_gives_the_upstream_outputs(package, kwargs, size):
    reference = perturbed(upstream_swin(package, **kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    ours.load_state_dict(reference.state_dict())  # the same keys: absolute_pos_embed
    assert ours.absolute_pos_embed.shape == (1, 56 * 56, 8)
    assert_same_outputs(ours, reference, torch.randn(1, 3, *size))


def test_swin_absolute_position_embedding_of_another_grid_loads_resized_as_mmpretrain_resizes_it(tmp_path):
    kwargs = dict(arch=SMALL_SWIN, use_abs_pos_embed=True, out_indices=(0, 1, 2, 3))
    source = perturbed(upstream_swin('mmpretrain', **kwargs, img_size=192)).state_dict()
    reference = upstream_swin('mmpretrain', **kwargs, img_size=224)
    reference.load_state_dict(source)
    reference.eval()
    torch.save({'state_dict': {'backbone.' + k: v for k, v in source.items()}}, tmp_path / 'swin192.pth')
    ours = LiSASwinTransformer(**kwargs, img_size=224,
                               init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'swin192.pth'),
                                             prefix='backbone.'))
    ours.init_weights()
    ours.eval()
    torch.testing.assert_close(ours.absolute_pos_embed, reference.absolute_pos_embed)
    assert_same_outputs(ours, reference, torch.randn(1, 3, 224, 224))


def test_swin_absolute_position_embedding_is_frozen_with_the_patch_embedding_where_upstream_freezes_it():
    mmseg = LiSASwinTransformer(**SMALL_SWIN, use_abs_pos_embed=True, frozen_stages=0)
    mmpretrain = LiSASwinTransformer(arch=SMALL_SWIN, img_size=224, use_abs_pos_embed=True, frozen_stages=0)
    assert not mmseg.absolute_pos_embed.requires_grad and mmpretrain.absolute_pos_embed.requires_grad


# ---------------------------------------------------------------- 7. which vocabulary a call means


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_a_call_that_fits_both_vocabularies_builds_lisas_own_model():
    pvt = LiSAPVT()  # the paper's LiSA-PVT-T, not mmdet's softmax PVT-Small
    assert round(count(pvt) / 1e6, 1) == 11.7 and pvt.upstream is None
    assert {type(b.attn).__name__ for s in pvt.stages for b in s.blocks} == {'LiSAAttention'}
    vit = LiSAViT(arch='deit-tiny', frozen_stages=0)  # LiSA DeiT-T; 0 freezes the embeddings (own meaning)
    assert type(vit.layers[0].attn).__name__ == 'LiSAAttention' and not vit.cls_token.requires_grad
    swin = LiSASwinTransformer(with_cp=True)
    assert type(swin.stages[0].blocks[0].attn).__name__ == 'LiSAAttention' and swin.out_indices == (0, 1, 2, 3)


@pytest.mark.parametrize('package, name, cls, kwargs, size', [
    ('mmdet', 'PyramidVisionTransformer', LiSAPVT, {}, (33, 47)),            # PVT-Small, softmax
    ('mmseg', 'SwinTransformer', LiSASwinTransformer, {}, (33, 47)),         # Swin-T, every stage out
    ('mmpretrain', 'SwinTransformer', LiSASwinTransformer, {}, (224, 233)),  # Swin-T, the last stage out
    ('mmpretrain', 'VisionTransformer', LiSAViT, dict(arch='deit-tiny'), (35, 50)),
    ('mmpretrain', 'DistilledVisionTransformer', LiSADistilledViT, dict(arch='deit-tiny'), (35, 50)),
])
def test_upstream_names_the_vocabulary_and_builds_the_upstream_defaults(package, name, cls, kwargs, size):
    registry = importlib.import_module(f'{package}.registry').MODELS
    with DefaultScope.overwrite_default_scope(package):
        reference = perturbed(registry.build(dict(type=name, **kwargs)))
    ours = cls(upstream=package, **kwargs).eval()
    assert ours.upstream == package and count(ours) == count(reference)
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, *size))


def test_upstream_gives_frozen_stages_its_meaning_there():
    ours = LiSASwinTransformer(upstream='mmpretrain', frozen_stages=0)
    assert not any(p.requires_grad for p in ours.stages[0].parameters())
    assert all(p.requires_grad for p in ours.stages[1].parameters()) and ours.out_indices == (3,)


@pytest.mark.parametrize('cls, kwargs, error, match', [
    (LiSAPVT, dict(upstream='mmdet', arch='tiny'), TypeError,
     r"LiSAPVT got upstream='mmdet' and its own arguments \(arch\)"),
    (LiSASwinTransformer, dict(upstream='mmpretrain', embed_dims=96), TypeError,
     r"upstream='mmpretrain' and arguments of mmseg's/mmdet's SwinTransformer \(embed_dims\)"),
    (LiSAViT, dict(upstream='mmseg'), ValueError, r"upstream='mmseg' is not one of \[None, 'mmpretrain'\]"),
])
def test_a_named_upstream_refuses_the_other_vocabularies(cls, kwargs, error, match):
    with pytest.raises(error, match=match):
        cls(**kwargs)


# ---------------------------------------------------------------- 4. mmpretrain Swin's stage_cfgs / block_cfgs


def test_mmpretrain_swin_stage_and_block_window_settings_give_mmpretrain_outputs():
    stage_cfgs = [dict(window_size=4), dict(block_cfgs=dict(pad_small_map=True)), {},
                  dict(pad_small_map=True, block_cfgs=dict(window_size=5))]
    kwargs = dict(arch=SMALL_SWIN, img_size=224, out_indices=(0, 1, 2, 3), stage_cfgs=stage_cfgs)
    reference = perturbed(upstream_swin('mmpretrain', **kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    assert [(s.blocks[0].attn.window_size, s.blocks[0].attn.pad_small_map) for s in ours.stages] == [
        (4, False), (7, True), (7, False), (5, True)]
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, 224, 233))


def test_mmpretrain_swin_norm_cfg_sets_only_the_output_norms_as_there():
    kwargs = dict(arch=SWIN, img_size=224, out_indices=(0, 1, 2, 3), norm_cfg=dict(type='LN', eps=0.1))
    reference = perturbed(upstream_swin('mmpretrain', **kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    eps = {n: m.eps for n, m in ours.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    assert eps == {n: m.eps for n, m in reference.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    assert {n for n, e in eps.items() if e == 0.1} == {'norm0', 'norm1', 'norm2', 'norm3'}
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, 224, 224))


def test_mmpretrain_swin_block_and_patch_merging_settings_give_mmpretrain_outputs():
    stage_cfgs = [
        dict(block_cfgs=dict(norm_cfg=dict(type='LN', eps=0.1), ffn_ratio=2.0, shift=True),
             downsample_cfg=dict(norm_cfg=dict(type='LN', eps=0.1), bias=True)),
        dict(with_cp=True, block_cfgs=dict(ffn_cfgs=dict(feedforward_channels=24, act_cfg=dict(type='ReLU'),
                                                         num_fcs=3, ffn_drop=0.1))),
        dict(block_cfgs=[dict(shift=False, attn_cfgs=dict(qkv_bias=False, attn_drop=0.1))] * 2,
             downsample_cfg=dict(norm_cfg=None)),
        dict(block_cfgs=dict(with_cp=True, ffn_cfgs=dict(add_identity=False, feedforward_channels=16))),
    ]
    kwargs = dict(arch=SWIN, img_size=224, out_indices=(0, 1, 2, 3), stage_cfgs=stage_cfgs)
    reference = perturbed(upstream_swin('mmpretrain', **kwargs))
    ours = LiSASwinTransformer(**kwargs).eval()
    assert [[b.attn.shift_size for b in s.blocks] for s in ours.stages] == [[3, 3], [0, 3], [0, 0], [0, 3]]
    assert [s.blocks[0].with_cp for s in ours.stages] == [False, True, False, True]
    assert [m.__class__.__name__ for m in ours.stages[1].blocks[0].ffn.layers] == ['Sequential'] * 2 + ['Linear',
                                                                                                        'Dropout']
    assert ours.stages[2].downsample.norm is None and ours.stages[2].blocks[0].attn.qkv.bias is None
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(1, 3, 224, 233))


def test_mmpretrain_swin_stage_and_block_drop_path_rates_are_mmpretrains():
    stage_cfgs = [dict(drop_paths=0.3), dict(drop_paths=[0.1, 0.2, 0.9]), dict(block_cfgs=dict(drop_path=0.4)),
                  dict(drop_paths=[0.1, 0.2], block_cfgs=dict(drop_path=0.0))]
    kwargs = dict(arch=SWIN, img_size=224, drop_path_rate=0.5, stage_cfgs=stage_cfgs)
    reference = upstream_swin('mmpretrain', **kwargs)
    ours = LiSASwinTransformer(**kwargs)
    want = [[b.attn.drop.drop_prob for b in s.blocks] for s in reference.stages]
    assert want == [[0.3, 0.3], [0.1, 0.2], [0.4, 0.4], [0.0, 0.0]]
    assert [[b.drop_path.drop_prob for b in s.blocks] for s in ours.stages] == want
    assert [[b.ffn.dropout_layer.drop_prob for b in s.blocks] for s in ours.stages] == want


@pytest.mark.parametrize('stage_cfgs, match', [
    (dict(drop_paths=[0.1]), r'stage_cfgs\[0\]\.drop_paths=\[0\.1\] is not supported \(one rate per block'),
    (dict(downsample_cfg=dict(kernel_size=3)),
     r"stage_cfgs\[0\]\.downsample_cfg\.kernel_size=3 is not supported \(the stages halve the grid.*\); only 2"),
    (dict(downsample_cfg=dict(out_channels=32)), r'downsample_cfg\.out_channels=32 .*\(.*\); only 16'),
    (dict(block_cfgs=dict(ffn_cfgs=dict(embed_dims=16))), r'block_cfgs\.ffn_cfgs\.embed_dims=16 .*; only 8'),
    (dict(block_cfgs=dict(ffn_cfgs=dict(init_cfg=dict(type='Kaiming')))),
     r'block_cfgs\.ffn_cfgs\.init_cfg=.* is not supported \(the backbone initialises'),
    (dict(block_cfgs=dict(attn_cfgs=dict(qk_scale=0.5))), r'block_cfgs\.attn_cfgs\.qk_scale=0\.5 .*only None'),
    (dict(block_cfgs=dict(attn_cfgs=dict(window_msa=object))), r'block_cfgs\.attn_cfgs\.window_msa=.* is not '
                                                                 r'supported \(the window attention is LiSA'),
    (dict(depth=3), r'stage_cfgs\[0\]\.depth=3 is not supported \(arch sets it\)'),
    (dict(shift=True), r"stage_cfgs\[0\]\.shift=True is not supported \(not an argument of mmpretrain's "
                       r'SwinBlockSequence\)'),
    (dict(block_cfgs=dict(ffn_drop=0.1)), r"block_cfgs\.ffn_drop=0\.1 .*\(not an argument of mmpretrain's "
                                          r'SwinBlock\)'),
    (dict(block_cfgs=[dict(shift=True), dict(shift=False)]), r'block_cfgs=.* is not supported \(the blocks of a '
                                                              r'stage share'),
])
def test_mmpretrain_swin_stage_settings_without_a_counterpart_are_refused_with_the_reason(stage_cfgs, match):
    with pytest.raises(ValueError, match=match):
        LiSASwinTransformer(arch=SWIN, img_size=224, stage_cfgs=stage_cfgs)


def test_mmpretrain_swin_without_output_norms_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r'norm_cfg=None is not supported \(.*output norm.*\)'):
        LiSASwinTransformer(arch=SWIN, img_size=224, norm_cfg=None)


def test_mmpretrain_swin_stage_settings_of_the_window_attention_need_a_window_stage():
    with pytest.raises(ValueError, match=r"stage_cfgs\[0\]\.shift=False: stage 0 uses the 'lisa' attention, "
                                         r"which has no shift"):
        LiSASwinTransformer(arch=SWIN, img_size=224, window_size=None, attn_cfgs=dict(type='lisa'),
                            stage_cfgs=dict(block_cfgs=dict(shift=False)))


def test_swin_norm_cfg_of_its_own_or_mmsegs_vocabulary_is_every_norm_and_its_stage_settings_are_checked():
    for kwargs in (dict(arch=SWIN), dict(SWIN)):  # own, mmseg's
        ours = LiSASwinTransformer(**kwargs, norm_cfg=dict(type='LN', eps=0.1))
        assert {m.eps for m in ours.modules() if isinstance(m, torch.nn.LayerNorm)} == {0.1}
    with pytest.raises(ValueError, match=r'block_cfgs\[1\] has shift; it may set norm_cfg, ffn_cfg, with_cp'):
        LiSASwinTransformer(arch=SWIN, block_cfgs=[{}, dict(shift=True), {}, {}])
    with pytest.raises(ValueError, match=r'block_cfgs\[0\]\.drop_path_rates=\[0\.1\] needs one rate per block \(2\)'):
        LiSASwinTransformer(arch=SWIN, block_cfgs=dict(drop_path_rates=[0.1]))
    with pytest.raises(ValueError, match=r'downsample_cfgs has 4 entries; .* one per patch merging \(3\)'):
        LiSASwinTransformer(arch=SWIN, downsample_cfgs=[{}] * 4)
    with pytest.raises(TypeError, match=r"mmpretrain's SwinTransformer \(stage_cfgs\) and its own \(block_cfgs\)"):
        LiSASwinTransformer(arch=SWIN, stage_cfgs={}, block_cfgs={})


# ---------------------------------------------------------------- 5. LiSAViT's state dict is mmpretrain's


def shapes(model: torch.nn.Module) -> dict[str, torch.Size]:
    return {k: v.shape for k, v in model.state_dict().items()}


@pytest.mark.parametrize('kwargs', [dict(out_type='cls_token'), dict(out_type='avg_featmap', out_indices=[0, -1]),
                                    dict(out_type='featmap', with_cls_token=False, final_norm=False)])
def test_vit_state_dict_is_mmpretrains_key_for_key_and_loads_into_it_unconverted(kwargs):
    reference = mmpretrain_backbones.VisionTransformer(**VIT, **kwargs)
    ours = perturbed(LiSAViT(**VIT, **kwargs))
    assert shapes(ours) == shapes(reference)
    reference.load_state_dict(ours.state_dict())  # mmpretrain's own loading: no converter on its side
    reference.eval()
    assert_same_outputs(ours, reference, torch.randn(1, 3, 40, 48))


def test_vit_of_its_own_vocabulary_has_mmpretrains_keys_too():
    ours = LiSAViT(arch='deit-tiny', attn_cfgs=dict(type='softmax'), out_type='avg_featmap')
    assert shapes(ours) == shapes(mmpretrain_backbones.VisionTransformer(arch='deit-tiny', out_type='avg_featmap'))


# ---------------------------------------------------------------- 6. DeiT's distillation token


def distilled(**kwargs) -> torch.nn.Module:
    """What a DeiT config with ``type='LiSADistilledViT'`` in place of ``DistilledVisionTransformer`` builds."""
    from mmpretrain.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(dict(type='LiSADistilledViT', **kwargs))


@pytest.mark.parametrize('out_type', ['cls_token', 'featmap', 'avg_featmap', 'raw'])
def test_distilled_deit_is_mmpretrains_key_for_key_and_output_for_output(out_type):
    kwargs = dict(VIT, out_type=out_type)
    reference = perturbed(mmpretrain_backbones.DistilledVisionTransformer(**kwargs, out_indices=[0, -1]))
    ours = distilled(**kwargs, out_indices=[0, -1]).eval()
    assert shapes(ours) == shapes(reference)  # dist_token, pos_embed of 2 + H*W rows
    ours.load_state_dict(reference.state_dict())
    assert_same_outputs(ours, reference, torch.randn(2, 3, 40, 48))  # cls_token: (class, distillation) tokens


def test_distilled_deit_frozen_stages_freezes_what_mmpretrain_freezes_for_every_value():
    for frozen_stages in range(-1, 4):
        reference = mmpretrain_backbones.DistilledVisionTransformer(**VIT, frozen_stages=frozen_stages)
        ours = distilled(**VIT, frozen_stages=frozen_stages)
        assert trainable_and_modes(ours, list)[0] == trainable_and_modes(reference, list)[0], frozen_stages


def test_lisa_on_the_distilled_deit_sees_both_tokens_as_prefix_and_trains_the_distillation_token():
    ours = distilled(**VIT, attn_cfgs=dict(type='lisa'))
    assert {(type(layer.attn).__name__, layer.attn.num_prefix_tokens) for layer in ours.layers} == {
        ('LiSAAttention', 2)}
    ((cls, dist),) = ours(torch.randn(2, 3, 40, 48))
    assert cls.shape == dist.shape == (2, 32)
    (dist * torch.randn(2, 32)).sum().backward()
    assert ours.dist_token.grad.abs().sum() > 0


def test_distilled_deit_of_its_own_vocabulary_is_lisa_and_freezes_the_distillation_token_with_the_embeddings():
    ours = LiSADistilledViT(arch='deit-tiny', frozen_stages=0)
    assert type(ours.layers[0].attn).__name__ == 'LiSAAttention' and ours.upstream is None
    assert not ours.dist_token.requires_grad and not ours.cls_token.requires_grad


def test_distilled_deit_without_its_class_token_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match=r'LiSADistilledViT: with_cls_token=False .*class token'):
        LiSADistilledViT(**VIT, with_cls_token=False, out_type='featmap')
