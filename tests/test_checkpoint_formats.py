"""Every checkpoint format a user has loads into the matching LiSA backbone through every
loading path, converted, with position tables resized, and computes what the model it came
from computes: official PVT v1 / Swin / DeiT releases, mmdet / mmseg / mmpretrain backbones,
and this project's classifiers. Checkpoints are written from randomly initialised mm models
(official layouts by a small inverse of the documented key mapping)."""
import math
import re
from fnmatch import fnmatch

import pytest
import torch
import torch.nn.functional as F
from mmengine.runner import load_checkpoint
from torch import nn

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.backbones import LiSAPVT, LiSASwinTransformer, LiSAViT
from projects.lisa.models.backbones.loading import IncompleteCheckpointError

mmdet_pvt = pytest.importorskip('mmdet.models.backbones.pvt')
mmseg_swin = pytest.importorskip('mmseg.models.backbones.swin')
mmseg_vit = pytest.importorskip('mmseg.models.backbones.vit')
mmpretrain_backbones = pytest.importorskip('mmpretrain.models.backbones')

PVT_ARCH = dict(embed_dims=[8, 16, 24, 32], depths=[2, 1, 1, 1], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2])
PVT_SR = [dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)]
SWIN_ARCH = dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])
VIT_ARCH = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)


def randomised(model):
    torch.manual_seed(0)
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    model.eval()  # mm backbones' train() may return None
    return model


def head(channels):
    return {'head.weight': torch.randn(5, channels), 'head.bias': torch.randn(5)}


# ---------------------------------------------------------------- the sources: (checkpoint, prefix, reference model)


def mmdet_pvt_model():
    return randomised(mmdet_pvt.PyramidVisionTransformer(
        pretrain_img_size=64, embed_dims=8, num_layers=PVT_ARCH['depths'], num_heads=PVT_ARCH['num_heads'],
        mlp_ratios=PVT_ARCH['mlp_ratios']))


def official_pvt(mm):
    """mmdet's keys back to github.com/whai362/PVT (the inverse of mmdet's ``pvt_convert``),
    with the classifier's class token (also as row 0 of the last position embedding) and head."""
    out = {}
    for key, value in mm.state_dict().items():
        i, part, j, rest = re.fullmatch(r'layers\.(\d+)\.(\d)\.(?:(\d+)\.)?(.+)', key).groups()
        s = int(i) + 1
        if part == '0':
            out[f'patch_embed{s}.{j + "." if j else ""}{rest}'.replace('projection', 'proj')] = value
        elif j == '0':
            out[f'pos_embed{s}'] = value
        else:
            block = f'block{s}.{int(j) - 1}.'
            if m := re.fullmatch(r'attn\.attn\.in_proj_(weight|bias)', rest):
                c = value.shape[0] // 3
                out[block + f'attn.q.{m[1]}'], out[block + f'attn.kv.{m[1]}'] = value[:c], value[c:]
            else:
                rest = rest.replace('attn.attn.out_proj.', 'attn.proj.')
                rest = rest.replace('ffn.layers.0.', 'mlp.fc1.').replace('ffn.layers.3.', 'mlp.fc2.')
                out[block + rest] = value.flatten(1) if rest.startswith('mlp.') and value.dim() == 4 else value
    d = out['pos_embed4'].shape[-1]
    out['cls_token'] = torch.randn(1, 1, d)
    out['pos_embed4'] = torch.cat([torch.randn(1, 1, d), out['pos_embed4']], dim=1)
    return dict(out, **{'norm.weight': torch.ones(d), 'norm.bias': torch.zeros(d)}, **head(d))


def mmseg_swin_model():
    return randomised(mmseg_swin.SwinTransformer(pretrain_img_size=64, window_size=4, **SWIN_ARCH))


def mmpretrain_swin_model():
    return randomised(mmpretrain_backbones.SwinTransformer(
        arch=SWIN_ARCH, img_size=64, window_size=4, out_indices=(0, 1, 2, 3), pad_small_map=True))


def official_swin(mm):
    """mmseg's keys back to github.com/microsoft/Swin-Transformer (the inverse of mmdet's
    ``swin_converter``); the official classifier has only the last output norm."""
    out = {}
    for key, value in mm.state_dict().items():
        if re.fullmatch(r'norm[012]\..*', key):
            continue
        key = key.replace('patch_embed.projection.', 'patch_embed.proj.').replace('stages.', 'layers.')
        key = key.replace('.attn.w_msa.', '.attn.').replace('ffn.layers.0.0.', 'mlp.fc1.')
        key = key.replace('ffn.layers.1.', 'mlp.fc2.').replace('norm3.', 'norm.')
        if '.downsample.' in key:  # nn.Unfold's channel order (4 c + u) -> the official (k C + c), k = (0,2,1,3)[u]
            value = value.unflatten(-1, (-1, 4))[..., [0, 2, 1, 3]].transpose(-1, -2).flatten(-2)
        out[key] = value
    return dict(out, **head(out['norm.weight'].shape[0]))


def mmpretrain_vit_model():
    return randomised(mmpretrain_backbones.VisionTransformer(arch=VIT_ARCH, img_size=32, patch_size=8,
                                                             out_type='featmap'))


def mmseg_vit_model():
    return randomised(mmseg_vit.VisionTransformer(
        img_size=32, patch_size=8, embed_dims=32, num_layers=2, num_heads=2, mlp_ratio=2, patch_bias=True,
        final_norm=True, norm_cfg=dict(type='LN', eps=1e-6)))


def official_deit(mm):
    """mmpretrain's keys back to facebookresearch/deit (timm's layout)."""
    out = {}
    for key, value in mm.state_dict().items():
        key = key.replace('ffn.layers.0.0.', 'mlp.fc1.').replace('ffn.layers.1.', 'mlp.fc2.')
        key = re.sub(r'^layers\.(\d+)\.ln([12])\.', r'blocks.\1.norm\2.', key).replace('layers.', 'blocks.')
        out[re.sub(r'^ln1\.', 'norm.', key.replace('patch_embed.projection.', 'patch_embed.proj.'))] = value
    return dict(out, **head(32))


def classifier(model):
    """A checkpoint of this project's mmpretrain classifier: the backbone under 'backbone.', a head."""
    return {'state_dict': {**{'backbone.' + k: v for k, v in randomised(model).state_dict().items()},
                           **{'head.fc.' + k[5:]: v for k, v in head(8).items()}}, 'meta': {}}


def mm_checkpoint(mm):
    return {'state_dict': {'backbone.' + k: v for k, v in mm.state_dict().items()}}


PVT = dict(arch=PVT_ARCH, attn_cfgs=PVT_SR, pretrain_img_size=64, drop_path_rate=0.0)
SWIN = dict(arch=SWIN_ARCH, attn_cfgs=dict(type='window', window_size=4), pretrain_img_size=64, drop_path_rate=0.0)
VIT = dict(arch=VIT_ARCH, attn_cfgs=dict(type='softmax'), pretrain_img_size=32, patch_size=8, out_type='featmap',
           drop_path_rate=0.0)


def sources():
    """name -> (backbone class, its kwargs, make() -> (checkpoint, prefix, reference model), input size)."""
    def own(cls, kwargs):
        def make():
            ckpt = classifier(cls(**kwargs))
            reference = cls(**kwargs).eval()
            reference.load_state_dict({k[9:]: v for k, v in ckpt['state_dict'].items() if k.startswith('backbone.')})
            return ckpt, 'backbone.', reference
        return make

    def mm(build, official=None):
        def make():
            model = build()
            return ({'model': official(model)}, None, model) if official else (mm_checkpoint(model), 'backbone.', model)
        return make

    swin_last = dict(SWIN, out_indices=(3,))  # an official Swin classifier has no norm0-2
    swin_lisa = dict(SWIN, attn_cfgs=[dict(type='lisa')] * 2 + [SWIN['attn_cfgs']] * 2)
    vit_lisa = dict(VIT, attn_cfgs=dict(type='lisa'))
    return {
        'pvt-official': (LiSAPVT, PVT, mm(mmdet_pvt_model, official_pvt), 64),
        'pvt-mmdet': (LiSAPVT, PVT, mm(mmdet_pvt_model), 64),
        'pvt-ours': (LiSAPVT, PVT, own(LiSAPVT, PVT), 64),
        'swin-official': (LiSASwinTransformer, swin_last, mm(mmseg_swin_model, official_swin), 64),
        'swin-mmseg': (LiSASwinTransformer, SWIN, mm(mmseg_swin_model), 64),
        'swin-mmpretrain': (LiSASwinTransformer, SWIN, mm(mmpretrain_swin_model), 64),
        'swin-ours': (LiSASwinTransformer, SWIN, own(LiSASwinTransformer, SWIN), 64),
        'swin-ours-lisa': (LiSASwinTransformer, swin_lisa, own(LiSASwinTransformer, swin_lisa), 64),
        'deit-official': (LiSAViT, VIT, mm(mmpretrain_vit_model, official_deit), 32),
        'vit-mmpretrain': (LiSAViT, VIT, mm(mmpretrain_vit_model), 32),
        'vit-mmseg': (LiSAViT, VIT, mm(mmseg_vit_model), 32),
        'vit-ours': (LiSAViT, VIT, own(LiSAViT, VIT), 32),
        'vit-ours-lisa': (LiSAViT, vit_lisa, own(LiSAViT, vit_lisa), 32),
    }


class Wrapper(nn.Module):
    """A detector / segmentor / classifier as far as loading is concerned: the backbone under 'backbone'."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone


def load(path, cls, kwargs, ckpt_file, prefix):
    """A ``cls(**kwargs)`` loaded from ``ckpt_file`` by one of the three loading paths."""
    if path == 'init_cfg':
        model = cls(**kwargs, init_cfg=dict(type='Pretrained', checkpoint=str(ckpt_file), prefix=prefix))
        model.init_weights()
        return model
    wrapper = Wrapper(cls(**kwargs)) if prefix else cls(**kwargs)
    target = wrapper.backbone if prefix else wrapper
    if path == 'load_checkpoint':  # what the Runner's load_from does
        load_checkpoint(wrapper, str(ckpt_file), map_location='cpu', strict=False)
    else:
        ckpt = torch.load(ckpt_file)
        missing, _ = wrapper.load_state_dict(ckpt.get('state_dict', ckpt.get('model')), strict=False)
        assert not missing, missing
    return target


SOURCES = sources()
PATHS = ('init_cfg', 'load_checkpoint', 'load_state_dict')


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('source', sorted(SOURCES))
def test_every_format_loads_by_every_path_and_computes_what_its_model_computes(tmp_path, source, path):
    cls, kwargs, make, size = SOURCES[source]
    ckpt, prefix, reference = make()
    torch.save(ckpt, tmp_path / 'ckpt.pth')
    model = load(path, cls, kwargs, tmp_path / 'ckpt.pth', prefix).eval()
    x = torch.randn(2, 3, size, size + 32)  # another grid than the tables' (every stage divisible: mmdet crops)
    with torch.no_grad():
        expected, got = reference(x), model(x)
    assert len(got) == len(kwargs.get('out_indices', got))
    for a, b in zip(got, expected[-len(got):], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def resized(table, key, grid):
    """``table`` of ``key`` resized to ``grid`` by hand: bicubic, class-token row kept."""
    if key.endswith('relative_position_bias_table'):
        side = int(table.shape[0] ** 0.5)
        return F.interpolate(table.T.reshape(1, -1, side, side), size=grid, mode='bicubic',
                             align_corners=False).flatten(2)[0].T
    side = math.isqrt(table.shape[1])
    prefix = table.shape[1] - side ** 2  # the class token's row (ViT), 0 for PVT
    grid_part = table[:, prefix:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid_part = F.interpolate(grid_part, size=grid, mode='bicubic', align_corners=False).flatten(2).transpose(1, 2)
    return torch.cat([table[:, :prefix], grid_part], dim=1)


def bigger(kwargs):
    """``kwargs`` with larger position tables: 1.5 x the pretraining size, Swin windows of 6."""
    def grown(cfg):
        return dict(cfg, window_size=6) if cfg['type'] == 'window' else cfg

    cfgs = kwargs['attn_cfgs']
    cfgs = grown(cfgs) if isinstance(cfgs, dict) else [grown(c) for c in cfgs]
    return dict(kwargs, pretrain_img_size=kwargs['pretrain_img_size'] * 3 // 2, attn_cfgs=cfgs)


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('source', sorted(SOURCES))
def test_position_tables_of_another_size_are_resized_bicubically_by_every_path(tmp_path, source, path):
    cls, kwargs, make, _ = SOURCES[source]
    ckpt, prefix, _ = make()
    torch.save(ckpt, tmp_path / 'ckpt.pth')
    same = load(path, cls, kwargs, tmp_path / 'ckpt.pth', prefix).state_dict()
    model = load(path, cls, bigger(kwargs), tmp_path / 'ckpt.pth', prefix)
    changed = [k for k, v in model.state_dict().items() if v.shape != same[k].shape]
    assert changed, 'no position table of this source changes size'
    for key, value in model.state_dict().items():
        if key.endswith('relative_position_bias_table'):
            grid = (11, 11)  # 2 * 6 - 1
        else:
            grid = model.get_submodule(key.rpartition('.')[0]).pos_shape if key in changed else None
        torch.testing.assert_close(value, resized(same[key], key, grid) if key in changed else same[key], msg=key)


def test_a_wrong_or_missing_prefix_is_an_error_that_says_what_the_keys_start_with(tmp_path):
    torch.save(classifier(LiSAPVT(**PVT)), tmp_path / 'cls.pth')
    with pytest.raises(IncompleteCheckpointError, match=r"(?s)loaded 0 of .*prefix=None right\? The checkpoint's keys "
                                                        r"start with \['backbone.', 'head.'\]"):
        load('init_cfg', LiSAPVT, PVT, tmp_path / 'cls.pth', None)
    with pytest.raises(KeyError, match=r"prefix 'model.backbone.'; its keys start with \['backbone.', 'head.'\]"):
        load('init_cfg', LiSAPVT, PVT, tmp_path / 'cls.pth', 'model.backbone.')


def test_lisa_from_a_softmax_checkpoint_needs_its_new_tensors_allowed_by_the_config(tmp_path):
    torch.save(mm_checkpoint(mmdet_pvt_model()), tmp_path / 'pvt.pth')
    cfg = dict(type='Pretrained', checkpoint=str(tmp_path / 'pvt.pth'), prefix='backbone.')
    model = LiSAPVT(**dict(PVT, attn_cfgs=dict(type='lisa')), init_cfg=cfg)
    with pytest.raises(IncompleteCheckpointError, match=r"(?s)NOT IN THE CHECKPOINT \(45\).*allow_new="
                                                        r"\['lisa_from_softmax'\]"):
        model.init_weights()
    lisa_only = ['*.attn.alpha', '*.attn.scale', '*.attn.dwc.*', '*.attn.positional_encoding.*', '*.attn.step_mlp.*']
    model = LiSAPVT(**dict(PVT, attn_cfgs=dict(type='lisa')), init_cfg=dict(cfg, allow_new=lisa_only))
    model.init_weights()
    softmax = load('init_cfg', LiSAPVT, PVT, tmp_path / 'pvt.pth', 'backbone.').state_dict()
    for key, value in model.state_dict().items():
        if key in softmax:
            torch.testing.assert_close(value, softmax[key], msg=key)
        else:
            assert any(fnmatch(key, pattern) for pattern in lisa_only), key


def test_pretrained_init_cfg_is_one_checked_dict(tmp_path):
    torch.save(classifier(LiSAPVT(**PVT)), tmp_path / 'cls.pth')
    cfg = dict(type='Pretrained', checkpoint=str(tmp_path / 'cls.pth'), prefix='backbone.')
    with pytest.raises(ValueError, match=r"give Pretrained as the one init_cfg dict \(not in a list\)"):
        LiSAPVT(**PVT, init_cfg=[cfg, dict(type='Constant', layer='LayerNorm', val=1.0)])
    with pytest.raises(TypeError, match="allow_nwe"):
        LiSAPVT(**PVT, init_cfg=dict(cfg, allow_nwe=['*'])).init_weights()
