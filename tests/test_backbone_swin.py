"""LiSASwinTransformer: the Swin scaffolding against mmseg's SwinTransformer, attention per
stage, output grids and Swin checkpoints. What every LiSA backbone does: test_backbone_common."""
import copy
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_backbone_common import assert_same_outputs

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.attention import LiSAAttention, ShiftedWindowAttention, SoftmaxAttention
from projects.lisa.models.attention.window import roll_grid
from projects.lisa.models.backbones.loading import load_pretrained
from projects.lisa.models.backbones.swin import LiSASwinTransformer

mmseg_swin = pytest.importorskip('mmseg.models.backbones.swin')
MMSEG_CONFIGS = Path(mmseg_swin.__file__).parents[2] / '.mim' / 'configs'

TINY = dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])
WINDOW4 = dict(type='window', window_size=4)
SMALL_INPUT = dict(arch=TINY, attn_cfgs=[dict(type='lisa')] * 2 + [WINDOW4] * 2, pretrain_img_size=64)
LISA_ONLY = ('scale', 'positional_encoding.weight', 'dwc.weight', 'dwc.bias', 'alpha', 'step_mlp.0.weight',
             'step_mlp.0.bias', 'step_mlp.2.weight', 'step_mlp.2.bias')


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def count(model):
    return sum(p.numel() for p in model.parameters())


def official_swin_state_dict(embed_dims, depths, num_heads, window=7, img=224):
    """Random tensors under the key names and shapes of the official Swin
    classifier (microsoft/Swin-Transformer, models/swin_transformer.py),
    including its buffers relative_position_index and attn_mask."""
    def r(*shape):
        return 0.2 * torch.randn(*shape)

    sd = {'patch_embed.proj.weight': r(embed_dims, 3, 4, 4), 'patch_embed.proj.bias': r(embed_dims),
          'patch_embed.norm.weight': 1 + r(embed_dims), 'patch_embed.norm.bias': r(embed_dims)}
    res = img // 4
    for i, (depth, heads) in enumerate(zip(depths, num_heads)):
        c, w = embed_dims * 2 ** i, min(window, res)
        for j in range(depth):
            b = f'layers.{i}.blocks.{j}.'
            sd.update({b + 'norm1.weight': 1 + r(c), b + 'norm1.bias': r(c),
                       b + 'attn.relative_position_bias_table': r((2 * w - 1) ** 2, heads),
                       b + 'attn.relative_position_index': torch.zeros(w * w, w * w, dtype=torch.long),
                       b + 'attn.qkv.weight': r(3 * c, c), b + 'attn.qkv.bias': r(3 * c),
                       b + 'attn.proj.weight': r(c, c), b + 'attn.proj.bias': r(c),
                       b + 'norm2.weight': 1 + r(c), b + 'norm2.bias': r(c),
                       b + 'mlp.fc1.weight': r(4 * c, c), b + 'mlp.fc1.bias': r(4 * c),
                       b + 'mlp.fc2.weight': r(c, 4 * c), b + 'mlp.fc2.bias': r(c)})
            if j % 2 and res > window:
                sd[b + 'attn_mask'] = torch.zeros((res // w) ** 2, w * w, w * w)
        if i < len(depths) - 1:
            sd.update({f'layers.{i}.downsample.reduction.weight': r(2 * c, 4 * c),
                       f'layers.{i}.downsample.norm.weight': 1 + r(4 * c),
                       f'layers.{i}.downsample.norm.bias': r(4 * c)})
        res //= 2
    c = embed_dims * 2 ** (len(depths) - 1)
    sd.update({'norm.weight': 1 + r(c), 'norm.bias': r(c), 'head.weight': r(10, c), 'head.bias': r(10)})
    return sd


def pretrained(path, **kwargs):
    return dict(type='Pretrained', checkpoint=str(path), **kwargs)


# ---------------------------------------------------------------- scaffolding parity with mmseg


def test_tiny_with_windows_everywhere_has_exactly_the_parameters_of_mmseg_swin_t_from_its_config():
    from mmengine.config import Config
    from mmseg.registry import MODELS
    cfg = Config.fromfile(
        MMSEG_CONFIGS / 'swin' / 'swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py')
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmseg'):  # other tests may leave another scope current
        reference = MODELS.build(cfg.model.backbone)
    ours = LiSASwinTransformer(arch='tiny', attn_cfgs=dict(type='window'))
    assert count(ours) == count(reference)
    for i in range(4):
        assert count(ours.stages[i]) == count(reference.stages[i])
        assert count(getattr(ours, f'norm{i}')) == count(getattr(reference, f'norm{i}'))


@pytest.mark.parametrize('h, w, shift', [(7, 7, 3), (14, 21, -3), (8, 12, 2), (4, 4, -2)])
def test_roll_grid_is_torch_roll_over_height_and_width(h, w, shift):
    x = torch.randn(2, h, w, 5)
    assert torch.equal(roll_grid(x, shift), torch.roll(x, (shift, shift), dims=(1, 2)))


@pytest.mark.parametrize('shift', [False, True])
def test_window_attention_computes_what_mmseg_shift_window_msa_computes(shift):
    reference = mmseg_swin.ShiftWindowMSA(embed_dims=16, num_heads=2, window_size=4, shift_size=2 * shift)
    reference.w_msa.relative_position_bias_table.data.normal_()
    ours = ShiftedWindowAttention(16, 2, window_size=4, shift=shift)
    ours.load_state_dict({k.replace('w_msa.', ''): v for k, v in reference.state_dict().items()
                          if not k.endswith('relative_position_index')})
    x = torch.randn(2, 9 * 11, 16)  # 9 x 11: padded to 12 x 12, cropped back
    torch.testing.assert_close(ours(x, (9, 11)), reference(x, (9, 11)))


@pytest.mark.slow
@pytest.mark.parametrize('size', [(224, 224), (100, 67)])
def test_window_model_computes_what_mmseg_swin_computes_from_the_same_official_checkpoint(tmp_path, size):
    from mmdet.models.backbones.swin import swin_converter
    official = official_swin_state_dict(**TINY)
    reference = mmseg_swin.SwinTransformer(embed_dims=8, depths=TINY['depths'], num_heads=TINY['num_heads'])
    reference.eval()  # mmseg's train() returns None
    converted = {k[len('backbone.'):]: v for k, v in swin_converter(official).items()
                 if not k.endswith(('relative_position_index', 'attn_mask'))}
    converted['norm3.weight'], converted['norm3.bias'] = converted.pop('norm.weight'), converted.pop('norm.bias')
    missing, unexpected = reference.load_state_dict(converted, strict=False)
    assert not unexpected  # missing: the index buffers and the output norms the classifier lacks
    assert all(k.endswith('relative_position_index') or re.fullmatch(r'norm[012]\.(weight|bias)', k) for k in missing)

    torch.save({'model': official}, tmp_path / 'swin_official.pth')
    ours = LiSASwinTransformer(arch=TINY, attn_cfgs=dict(type='window'),
                               init_cfg=pretrained(tmp_path / 'swin_official.pth', allow_new=['norm[012].*']))
    ours.init_weights()
    ours.eval()
    assert_same_outputs(ours, reference, torch.randn(2, 3, *size))


def test_official_patch_merging_weights_merge_the_2x2_neighbourhood_as_the_official_swin_does(tmp_path):
    official = official_swin_state_dict(**TINY)
    torch.save({'model': official}, tmp_path / 'swin_official.pth')
    model = LiSASwinTransformer(arch=TINY, attn_cfgs=dict(type='window'))
    report = load_pretrained(model, str(tmp_path / 'swin_official.pth'), allow_new=['norm[012].*'])
    assert report.converted and not report.unexpected and not report.mismatched and not report.missing
    assert sorted(report.new) == sorted(f'norm{i}.{t}' for i in range(3) for t in ('weight', 'bias'))
    x = torch.randn(1, 6, 8, 8)  # (B, H, W, C) with C = 8 channels of stage 1
    expected = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1).flatten(1, 2)
    expected = F.layer_norm(expected, (32,), official['layers.0.downsample.norm.weight'],
                            official['layers.0.downsample.norm.bias'])
    expected = expected @ official['layers.0.downsample.reduction.weight'].T
    got, hw = model.stages[0].downsample(x.flatten(1, 2), (6, 8))
    assert hw == (3, 4)
    torch.testing.assert_close(got, expected)


def test_mmseg_swin_backbone_checkpoint_loads_and_computes_the_same(tmp_path):
    reference = mmseg_swin.SwinTransformer(embed_dims=8, depths=TINY['depths'], num_heads=TINY['num_heads'],
                                           window_size=4)
    reference.eval()
    for p in reference.parameters():
        p.data.normal_(0, 0.2)
    torch.save({'state_dict': {'backbone.' + k: v for k, v in reference.state_dict().items()}}, tmp_path / 'mm.pth')
    ours = LiSASwinTransformer(**dict(SMALL_INPUT, attn_cfgs=WINDOW4)).eval()
    report = load_pretrained(ours, str(tmp_path / 'mm.pth'), 'backbone.')
    assert report.converted and not (report.new or report.unexpected)
    assert_same_outputs(ours, reference, torch.randn(1, 3, 64, 48))


# ---------------------------------------------------------------- attention per stage


def test_default_is_lisa_over_the_whole_map_in_stages_1_2_and_shifted_7x7_windows_in_stages_3_4():
    model = LiSASwinTransformer(arch='tiny')
    for i in (0, 1):
        for block in model.stages[i].blocks:
            assert type(block.attn) is LiSAAttention
            assert block.attn.positional_encoding.pos_shape == (56 // 2 ** i, 56 // 2 ** i)
    for i in (2, 3):
        attns = [block.attn for block in model.stages[i].blocks]
        assert all(type(a) is ShiftedWindowAttention and a.window_size == 7 for a in attns)
        assert [a.shift_size for a in attns] == [0, 3] * (len(attns) // 2)


def test_stages_take_their_own_attention_and_its_hyper_parameters():
    cfgs = [dict(type='lisa', num_steps=2, local_kernel_size=5), dict(type='softmax'),
            dict(type='flatten', dwc_kernel_size=3), dict(type='window', window_size=2)]
    model = LiSASwinTransformer(**dict(SMALL_INPUT, attn_cfgs=cfgs), qkv_bias=False, attn_drop_rate=0.1, drop_rate=0.2)
    a0, a1, a2, a3 = (s.blocks[1].attn for s in model.stages)
    assert (a0.num_steps, a0.local_kernel_size, a0.positional_encoding.pos_shape) == (2, 5, (16, 16))
    assert type(a1) is SoftmaxAttention and (a1.sr_ratio, a1.attn_drop) == (1, 0.1)
    assert a2.dwc.kernel_size == (3, 3) and a2.positional_encoding.pos_shape == (4, 4)
    assert (a3.window_size, a3.shift_size, a3.attn_drop) == (2, 1, 0.1)
    assert a3.relative_position_bias_table.shape == (9, 4)
    assert all(a.qkv.bias is None and a.proj_drop.p == 0.2 for a in (a0, a1, a2, a3))
    assert model(torch.randn(1, 3, 64, 64))[3].shape == (1, 64, 2, 2)


# ---------------------------------------------------------------- dense-prediction behaviour


@pytest.mark.slow
@pytest.mark.parametrize('out_indices', [(0, 1, 2, 3), (3,), (0, 2)])
def test_outputs_have_the_channels_and_strides_4_8_16_32_of_the_chosen_stages(out_indices):
    model = LiSASwinTransformer(out_indices=out_indices, **SMALL_INPUT)
    outs = model(torch.randn(2, 3, 96, 64))
    assert [tuple(o.shape) for o in outs] == [(2, 8 * 2 ** i, 96 // 4 // 2 ** i, 64 // 4 // 2 ** i)
                                              for i in out_indices]
    assert [n for n, _ in model.named_children() if n.startswith('norm')] == [f'norm{i}' for i in out_indices]


@pytest.mark.parametrize('attn_cfgs', [None, dict(type='window')])
@pytest.mark.parametrize('size', [(33, 33), (100, 67)])
def test_any_input_size_is_padded_so_stage_i_has_ceil_of_size_over_its_stride(attn_cfgs, size):
    kwargs = {} if attn_cfgs is None else dict(attn_cfgs=attn_cfgs)
    model = LiSASwinTransformer(arch=TINY, **kwargs)  # window 7: every map of these inputs is padded
    outs = model(torch.randn(1, 3, *size))
    assert [tuple(o.shape[2:]) for o in outs] == [
        (math.ceil(size[0] / 2 ** (i + 2)), math.ceil(size[1] / 2 ** (i + 2))) for i in range(4)]
    assert all(torch.isfinite(o).all() for o in outs)


# ---------------------------------------------------------------- pretrained weights


def test_official_checkpoint_initialises_every_shared_weight_and_reports_the_lisa_ones_as_new(tmp_path):
    official = official_swin_state_dict(**TINY)
    torch.save({'model': official}, tmp_path / 'swin_tiny.pth')
    model = LiSASwinTransformer(arch=TINY)
    model.init_weights()
    fresh = copy.deepcopy(model.state_dict())
    allow_new = ['norm[012].*', *(f'stages.*.attn.{n}*' for n in LISA_ONLY)]
    report = load_pretrained(model, str(tmp_path / 'swin_tiny.pth'), allow_new=allow_new)

    lisa_blocks = [f'stages.{i}.blocks.{j}.attn.' for i in (0, 1) for j in (0, 1)]
    assert report.converted and not report.mismatched and not report.resized and not report.missing
    output_norms = [f'norm{i}.{t}' for i in range(3) for t in ('weight', 'bias')]  # official: only the last
    assert sorted(report.new) == sorted([b + n for b in lisa_blocks for n in LISA_ONLY] + output_norms)
    assert sorted(report.unexpected) == sorted(b + 'relative_position_bias_table' for b in lisa_blocks)
    state = model.state_dict()
    for key in report.new:
        assert torch.equal(state[key], fresh[key]), key
    for i, j in ((0, 1), (3, 0)):  # a LiSA and a window stage share the projections
        for name in ('attn.qkv.weight', 'attn.proj.bias', 'norm2.weight'):
            torch.testing.assert_close(state[f'stages.{i}.blocks.{j}.{name}'],
                                       official[f'layers.{i}.blocks.{j}.{name}'])
    torch.testing.assert_close(state['stages.2.blocks.1.attn.relative_position_bias_table'],
                               official['layers.2.blocks.1.attn.relative_position_bias_table'])
    torch.testing.assert_close(state['stages.1.blocks.0.ffn.layers.0.0.weight'],
                               official['layers.1.blocks.0.mlp.fc1.weight'])
    torch.testing.assert_close(state['norm3.weight'], official['norm.weight'])


def test_window_tables_of_another_window_size_are_resized_bicubically(tmp_path):
    source = LiSASwinTransformer(**dict(SMALL_INPUT, attn_cfgs=WINDOW4))
    for p in source.parameters():
        p.data.normal_()
    torch.save({'state_dict': source.state_dict()}, tmp_path / 'w4.pth')
    model = LiSASwinTransformer(**dict(SMALL_INPUT, attn_cfgs=dict(type='window', window_size=6)))
    report = load_pretrained(model, str(tmp_path / 'w4.pth'))
    assert not (report.new or report.unexpected) and len(report.resized) == 8
    key = 'stages.1.blocks.1.attn.relative_position_bias_table'
    old = source.state_dict()[key]  # (7 * 7, heads)
    expected = F.interpolate(old.T.reshape(1, 2, 7, 7), size=(11, 11), mode='bicubic',
                             align_corners=False).reshape(2, 121).T
    torch.testing.assert_close(model.state_dict()[key], expected)


# ---------------------------------------------------------------- configuration errors


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(arch='huge'), ValueError, r"arch='huge' is not one of \['b', 'base', 'l', 'large', 's', 'small', 't'"),
    (dict(arch=dict(TINY, num_heads=[1, 2, 2])), ValueError, r'one entry per stage .* lengths'),
    (dict(attn_cfgs=dict(type='window', window_size=0)), ValueError, 'window_size=0 must be >= 1'),
    (dict(attn_cfgs=dict(type='flatten', focusing_factor=0.5)), ValueError,
     r'stage 0, block 0: attention .*focusing_factor=0.5'),
])
def test_bad_configurations_are_rejected_with_a_clear_message(kwargs, error, match):
    with pytest.raises(error, match=match):
        LiSASwinTransformer(**dict(SMALL_INPUT, **kwargs))


def test_arch_names_short_and_long_give_the_paper_presets():
    paper = dict(tiny=(96, [2, 2, 6, 2], [3, 6, 12, 24]), small=(96, [2, 2, 18, 2], [3, 6, 12, 24]),
                 base=(128, [2, 2, 18, 2], [4, 8, 16, 32]))
    for name, (dims, depths, heads) in paper.items():
        for alias in (name, name[0], name.upper()):
            settings = LiSASwinTransformer.resolve_arch(alias)
            assert settings == dict(embed_dims=dims, depths=depths, num_heads=heads)
