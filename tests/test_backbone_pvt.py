"""LiSAPVT: the PVT v1 scaffolding against mmdet's PyramidVisionTransformer, attention per
stage, output grids and PVT checkpoints. What every LiSA backbone does: test_backbone_common."""
import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_backbone_common import assert_same_outputs

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.attention import LinearAttention, LiSAAttention, SoftmaxAttention
from projects.lisa.models.backbones.grid import resize_grid_tokens
from projects.lisa.models.backbones.loading import IncompleteCheckpointError, load_pretrained
from projects.lisa.models.backbones.pvt import LiSAPVT

mmdet_pvt = pytest.importorskip('mmdet.models.backbones.pvt')
MMDET_CONFIGS = Path(mmdet_pvt.__file__).parents[2] / '.mim' / 'configs'

TINY = dict(embed_dims=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2])
PVT_SR = [dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def count(model):
    return sum(p.numel() for p in model.parameters())


def official_pvt_state_dict(dims, depths, mlp_ratios, sr_ratios, patch_sizes=(4, 2, 2, 2), img=224):
    """Random tensors under the key names and shapes of the official PVT v1
    classifier (whai362/PVT, classification/pvt.py): q and kv projections,
    stage-4 position embedding with the class token, final norm, class token, head."""
    def r(*shape):
        return 0.2 * torch.randn(*shape)

    sd, stride, cin = {}, 1, 3
    for s, (c, d, m, sr, p) in enumerate(zip(dims, depths, mlp_ratios, sr_ratios, patch_sizes), 1):
        stride *= p
        sd.update({f'patch_embed{s}.proj.weight': r(c, cin, p, p), f'patch_embed{s}.proj.bias': r(c),
                   f'patch_embed{s}.norm.weight': 1 + r(c), f'patch_embed{s}.norm.bias': r(c),
                   f'pos_embed{s}': r(1, (img // stride) ** 2 + (s == len(dims)), c)})
        for j in range(d):
            b = f'block{s}.{j}.'
            sd.update({b + 'norm1.weight': 1 + r(c), b + 'norm1.bias': r(c),
                       b + 'attn.q.weight': r(c, c), b + 'attn.q.bias': r(c),
                       b + 'attn.kv.weight': r(2 * c, c), b + 'attn.kv.bias': r(2 * c),
                       b + 'attn.proj.weight': r(c, c), b + 'attn.proj.bias': r(c),
                       b + 'norm2.weight': 1 + r(c), b + 'norm2.bias': r(c),
                       b + 'mlp.fc1.weight': r(m * c, c), b + 'mlp.fc1.bias': r(m * c),
                       b + 'mlp.fc2.weight': r(c, m * c), b + 'mlp.fc2.bias': r(c)})
            if sr > 1:
                sd.update({b + 'attn.sr.weight': r(c, c, sr, sr), b + 'attn.sr.bias': r(c),
                           b + 'attn.norm.weight': 1 + r(c), b + 'attn.norm.bias': r(c)})
        cin = c
    sd.update({'norm.weight': 1 + r(dims[-1]), 'norm.bias': r(dims[-1]), 'cls_token': r(1, 1, dims[-1]),
               'head.weight': r(10, dims[-1]), 'head.bias': r(10)})
    return sd


def pretrained(path):
    return dict(type='Pretrained', checkpoint=str(path))


# ---------------------------------------------------------------- scaffolding parity with mmdet


def test_tiny_with_pvt_softmax_has_exactly_the_parameters_of_mmdet_pvt_t_from_its_config():
    from mmdet.registry import MODELS
    from mmengine.config import Config
    cfg = Config.fromfile(MMDET_CONFIGS / 'pvt' / 'retinanet_pvt-t_fpn_1x_coco.py')
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):  # other tests may leave another scope current
        reference = MODELS.build(cfg.model.backbone)
    ours = LiSAPVT(arch='tiny', attn_cfgs=PVT_SR)
    assert count(ours) == count(reference)
    assert [sum(p.numel() for p in s.parameters()) for s in ours.stages] == [
        sum(p.numel() for p in layer.parameters()) for layer in reference.layers]


@pytest.mark.slow
@pytest.mark.parametrize('size', [(224, 224), (160, 96)])
def test_softmax_model_computes_what_mmdet_pvt_computes_from_the_same_official_checkpoint(tmp_path, size):
    arch = dict(embed_dims=[8, 16, 24, 32], depths=[2, 1, 1, 1], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2])
    official = official_pvt_state_dict(arch['embed_dims'], arch['depths'], arch['mlp_ratios'], (8, 4, 2, 1))
    reference = mmdet_pvt.PyramidVisionTransformer(embed_dims=8, num_layers=arch['depths'], num_heads=[1, 2, 3, 4],
                                                   mlp_ratios=arch['mlp_ratios']).eval()
    reference.load_state_dict(mmdet_pvt.pvt_convert(official), strict=True)
    torch.save(official, tmp_path / 'pvt_official.pth')
    ours = LiSAPVT(arch=arch, attn_cfgs=PVT_SR, init_cfg=pretrained(tmp_path / 'pvt_official.pth'))
    ours.init_weights()
    ours.eval()
    assert_same_outputs(ours, reference, torch.randn(2, 3, *size))


# ---------------------------------------------------------------- attention per stage


def test_default_is_lisa_in_all_four_stages_without_spatial_reduction():
    model = LiSAPVT(arch='tiny')
    for i, stage in enumerate(model.stages):
        for block in stage.blocks:
            assert type(block.attn) is LiSAAttention
            assert block.attn.positional_encoding.pos_shape == (56 // 2 ** i, 56 // 2 ** i)
    assert not any('.sr.' in name for name, _ in model.named_parameters())


def test_stages_take_their_own_attention_and_its_hyper_parameters():
    cfgs = [dict(type='softmax', sr_ratio=4), dict(type='linear'),
            dict(type='flatten', focusing_factor=2.0, dwc_kernel_size=3),
            dict(type='lisa', num_steps=5, step_weights='geometric', beta=0.3, use_local=False, dwc=False)]
    model = LiSAPVT(arch=TINY, attn_cfgs=cfgs, pretrain_img_size=64, qkv_bias=False, drop_rate=0.2,
                    attn_drop_rate=0.1)
    a0, a1, a2, a3 = (s.blocks[0].attn for s in model.stages)
    assert (type(a0), a0.sr_ratio, a0.attn_drop, a0.qkv.bias) == (SoftmaxAttention, 4, 0.1, None)
    assert type(a1) is LinearAttention and a1.positional_encoding.pos_shape == (8, 8)
    assert (a2.focusing_factor, a2.dwc.kernel_size) == (2.0, (3, 3))
    assert (a3.num_steps, a3.step_weights, a3.beta, a3.use_local, a3.dwc, a3.step_mlp) == (
        5, 'geometric', 0.3, False, None, None)
    assert all(a.proj_drop.p == 0.2 for a in (a0, a1, a2, a3))
    assert model(torch.randn(1, 3, 64, 64))[0].shape == (1, 8, 16, 16)


# ---------------------------------------------------------------- dense-prediction behaviour


@pytest.mark.parametrize('out_indices', [(0, 1, 2, 3), (3,), (1, 2)])
def test_outputs_have_the_channels_and_strides_4_8_16_32_of_the_chosen_stages(out_indices):
    model = LiSAPVT(arch=TINY, out_indices=out_indices, pretrain_img_size=64)
    outs = model(torch.randn(2, 3, 96, 64))
    assert [tuple(o.shape) for o in outs] == [
        (2, TINY['embed_dims'][i], 96 // 4 // 2 ** i, 64 // 4 // 2 ** i) for i in out_indices]


@pytest.mark.parametrize('name', ['softmax', 'lisa'])
@pytest.mark.parametrize('size', [(33, 33), (100, 67)])
def test_any_input_size_is_padded_so_stage_i_has_ceil_of_size_over_its_stride(name, size):
    cfg = [dict(type='softmax', sr_ratio=r) for r in (2, 2, 1, 1)] if name == 'softmax' else dict(type=name)
    model = LiSAPVT(arch=TINY, attn_cfgs=cfg, pretrain_img_size=64)
    outs = model(torch.randn(1, 3, *size))
    assert [tuple(o.shape[2:]) for o in outs] == [
        (math.ceil(size[0] / 2 ** (i + 2)), math.ceil(size[1] / 2 ** (i + 2))) for i in range(4)]
    assert all(torch.isfinite(o).all() for o in outs)


def test_position_embedding_is_resized_bilinearly_from_the_pretraining_grid():
    stage = LiSAPVT(arch=TINY, attn_cfgs=dict(type='linear'), pretrain_img_size=64).stages[0]
    stage.pos_embed.data.normal_()
    grid = stage.pos_embed.reshape(1, 16, 16, 8).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(24, 10), mode='bilinear', align_corners=False).flatten(2).transpose(1, 2)
    got = resize_grid_tokens(stage.pos_embed, stage.pos_shape, (24, 10), 'bilinear')
    torch.testing.assert_close(got, expected)


# ---------------------------------------------------------------- pretrained weights


def test_official_checkpoint_initialises_every_shared_weight_and_lists_the_lisa_ones_as_new(tmp_path):
    official = official_pvt_state_dict(TINY['embed_dims'], TINY['depths'], TINY['mlp_ratios'], (8, 4, 2, 1), img=64)
    torch.save({'model': official}, tmp_path / 'pvt_tiny.pth')
    lisa_only = ('scale', 'positional_encoding.weight', 'dwc.weight', 'dwc.bias', 'alpha', 'step_mlp.0.weight',
                 'step_mlp.0.bias', 'step_mlp.2.weight', 'step_mlp.2.bias')
    expected_new = sorted(f'stages.{s}.blocks.0.attn.{n}' for s in range(4) for n in lisa_only)
    with pytest.raises(IncompleteCheckpointError, match=r'(?s)NOT IN THE CHECKPOINT \(36\).*allow_new=') as error:
        load_pretrained(LiSAPVT(arch=TINY, pretrain_img_size=64), str(tmp_path / 'pvt_tiny.pth'))
    assert all(key in str(error.value) for key in expected_new)

    model = LiSAPVT(arch=TINY, pretrain_img_size=64)
    model.init_weights()
    fresh = copy.deepcopy(model.state_dict())
    report = load_pretrained(model, str(tmp_path / 'pvt_tiny.pth'), allow_new=[f'*.attn.{n}*' for n in lisa_only])
    assert report.converted and not report.mismatched and not report.resized and not report.missing
    assert sorted(report.new) == expected_new
    assert sorted(report.unexpected) == sorted(f'stages.{s}.blocks.0.attn.{n}.{t}' for s in range(3)
                                               for n in ('sr', 'norm') for t in ('weight', 'bias'))
    state = model.state_dict()
    for key in report.new:
        assert torch.equal(state[key], fresh[key]), key
    torch.testing.assert_close(state['stages.2.blocks.0.attn.qkv.weight'], torch.cat(
        [official['block3.0.attn.q.weight'], official['block3.0.attn.kv.weight']]))
    torch.testing.assert_close(state['stages.3.pos_embed'], official['pos_embed4'][:, 1:])
    torch.testing.assert_close(state['stages.1.blocks.0.ffn.layers.1.weight'], official['block2.0.mlp.fc2.weight'])
    assert 'new by design (allow_new), initialised (36)' in str(report)
    assert 'unused, not in this model (12)' in str(report)


def test_position_tables_from_another_pretraining_size_are_resized_bicubically(tmp_path):
    source = LiSAPVT(arch=TINY, pretrain_img_size=32)
    for p in source.parameters():
        p.data.normal_()
    torch.save({'state_dict': source.state_dict()}, tmp_path / 'small.pth')
    model = LiSAPVT(arch=TINY, pretrain_img_size=64)
    report = load_pretrained(model, str(tmp_path / 'small.pth'))
    assert not report.missing and not report.unexpected and len(report.resized) == 8
    for key in ('stages.0.pos_embed', 'stages.2.blocks.0.attn.positional_encoding.weight'):
        old = source.state_dict()[key]
        side = math.isqrt(old.shape[1])
        expected = F.interpolate(old.reshape(1, side, side, -1).permute(0, 3, 1, 2), size=(2 * side, 2 * side),
                                 mode='bicubic', align_corners=False).flatten(2).transpose(1, 2)
        torch.testing.assert_close(model.state_dict()[key], expected)


def test_shape_mismatches_are_an_error_that_lists_them_and_loads_nothing(tmp_path):
    source = LiSAPVT(arch=dict(TINY, mlp_ratios=[4, 2, 2, 2]), pretrain_img_size=64)
    torch.save(source.state_dict(), tmp_path / 'other.pth')
    model = LiSAPVT(arch=TINY, pretrain_img_size=64)
    fresh = copy.deepcopy(model.state_dict())
    with pytest.raises(IncompleteCheckpointError,
                       match=r'SHAPE MISMATCH \(3\): stages.0.blocks.0.ffn.layers.0.0.weight '
                       r'checkpoint \(32, 8\) vs model \(16, 8\), .*ffn.layers.1.weight checkpoint \(8, 32\)'):
        load_pretrained(model, str(tmp_path / 'other.pth'))
    for key, value in fresh.items():
        assert torch.equal(model.state_dict()[key], value), key


# ---------------------------------------------------------------- configuration errors


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(arch='huge'), ValueError, r"arch='huge' is not one of \['l', 'large', 'm', 'medium', 's', 'small'"),
    (dict(arch=dict(TINY, depths=[1, 1, 1])), ValueError, r'one entry per stage .* lengths'),
    (dict(attn_cfgs=dict(type='lisa', sr_ratio=2)), TypeError, r"stage 0, block 0: attention .*sr_ratio"),
    (dict(attn_cfgs=dict(type='lisa', num_steps=0)), ValueError, r'stage 0, block 0: attention .*num_steps=0'),
    (dict(patch_sizes=(4, 2, 2)), ValueError, r'patch_sizes=\(4, 2, 2\) needs one entry per stage \(4\)'),
])
def test_bad_configurations_are_rejected_with_a_clear_message(kwargs, error, match):
    kwargs = dict(dict(arch=TINY, pretrain_img_size=64), **kwargs)
    with pytest.raises(error, match=match):
        LiSAPVT(**kwargs)


def test_arch_names_short_and_long_give_the_paper_presets():
    paper_depths = dict(tiny=[2, 2, 2, 2], small=[3, 4, 6, 3], medium=[3, 4, 18, 3], large=[3, 8, 27, 3])
    for name, depths in paper_depths.items():
        for alias in (name, name[0], name.upper()):
            settings = LiSAPVT.resolve_arch(alias)
            assert settings == dict(embed_dims=[64, 128, 320, 512], depths=depths, num_heads=[1, 2, 5, 8],
                                    mlp_ratios=[8, 8, 4, 4])
