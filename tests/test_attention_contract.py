"""One attention contract: every type, built-in or registered later from outside the package,
is built from ``dict(type=NAME, **kwargs)`` with the same context in every backbone."""
import re

import pytest
import torch
from torch import nn

import projects.lisa.registry  # noqa: F401  (registers the backbones)
from projects.lisa.models.attention import ATTENTIONS, CONTEXT, build_attention, register_attention
from projects.lisa.models.backbones import LiSAPVT, LiSASwinTransformer, LiSAViT

PVT = dict(arch=dict(embed_dims=[8, 16, 24, 32], depths=[1, 2, 1, 1], num_heads=[1, 2, 3, 4],
                     mlp_ratios=[2, 2, 2, 2]), pretrain_img_size=64)
SWIN = dict(arch=dict(embed_dims=8, depths=[1, 2, 1, 1], num_heads=[1, 2, 2, 4]), pretrain_img_size=64)
VIT = dict(arch=dict(embed_dims=16, num_layers=3, num_heads=2, feedforward_channels=32), pretrain_img_size=32,
           patch_size=8, out_type='featmap')


class ToyAttention(nn.Module):
    """``scale * proj(x)``, recording the context it was built with."""

    def __init__(self, dim, num_heads, qkv_bias=True, attn_drop=0.0, proj_drop=0.0, pos_shape=None,
                 num_prefix_tokens=0, block_index=0, scale=1.0):
        super().__init__()
        self.context = dict(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                            proj_drop=proj_drop, pos_shape=pos_shape, num_prefix_tokens=num_prefix_tokens,
                            block_index=block_index)
        self.scale = scale
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, hw_shape):
        assert x.shape[1] == self.context['num_prefix_tokens'] + hw_shape[0] * hw_shape[1]
        return self.scale * self.proj(x)


@pytest.fixture
def toy():
    """'toy' registered after the package (and every backbone) was imported; removed after the test."""
    register_attention('toy')(ToyAttention)
    yield dict(type='toy', scale=0.5)
    del ATTENTIONS['toy']


def contexts(model):
    return [m.context for m in model.modules() if isinstance(m, ToyAttention)]


def expected(dims, depths, grids, prefix, common):
    return [dict(dim=d, num_heads=h, pos_shape=g, num_prefix_tokens=prefix, block_index=j, **common)
            for (d, h), depth, g in zip(dims, depths, grids) for j in range(depth)]


def test_a_type_registered_after_import_gets_the_same_context_in_pvt(toy):
    model = LiSAPVT(**PVT, attn_cfgs=toy, qkv_bias=False, attn_drop_rate=0.1, drop_rate=0.2)
    common = dict(qkv_bias=False, attn_drop=0.1, proj_drop=0.2)
    assert contexts(model) == expected([(8, 1), (16, 2), (24, 3), (32, 4)], [1, 2, 1, 1],
                                       [(16, 16), (8, 8), (4, 4), (2, 2)], 0, common)
    assert all(m.scale == 0.5 for m in model.modules() if isinstance(m, ToyAttention))
    assert [o.shape[1:] for o in model(torch.randn(1, 3, 64, 64))] == [(8, 16, 16), (16, 8, 8), (24, 4, 4),
                                                                       (32, 2, 2)]


def test_a_type_registered_after_import_gets_the_same_context_in_swin(toy):
    model = LiSASwinTransformer(**SWIN, attn_cfgs=[toy, toy, dict(type='window', window_size=2), toy],
                                attn_drop_rate=0.1)
    common = dict(qkv_bias=True, attn_drop=0.1, proj_drop=0.0)
    toy_stages = [((8, 1), 1, (16, 16)), ((16, 2), 2, (8, 8)), ((64, 4), 1, (2, 2))]
    assert contexts(model) == expected(*zip(*toy_stages), 0, common)
    windows = [b.attn for b in model.stages[2].blocks]
    assert [(type(w).__name__, w.window_size, w.shift_size) for w in windows] == [('ShiftedWindowAttention', 2, 0)]
    assert model(torch.randn(1, 3, 64, 64))[3].shape == (1, 64, 2, 2)


@pytest.mark.parametrize('with_cls_token', [True, False])
def test_a_type_registered_after_import_gets_the_same_context_in_vit(toy, with_cls_token):
    model = LiSAViT(**VIT, attn_cfgs=[toy, dict(type='softmax'), toy], with_cls_token=with_cls_token)
    common = dict(qkv_bias=True, attn_drop=0.0, proj_drop=0.0)
    got = contexts(model)
    assert got == [dict(dim=16, num_heads=2, pos_shape=(4, 4), num_prefix_tokens=int(with_cls_token), block_index=i,
                        **common) for i in (0, 2)]
    assert model(torch.randn(2, 3, 32, 32))[0].shape == (2, 16, 4, 4)


def test_a_toy_block_computes_x_plus_scaled_projection_then_the_ffn(toy):
    """The block calls the attention as any other: x + attn(norm1(x)), then the FFN."""
    model = LiSAViT(**dict(VIT, out_type='raw'), attn_cfgs=toy, drop_path_rate=0.0).eval()
    layer = model.layers[0]
    x = torch.randn(2, 17, 16)
    h = x + 0.5 * layer.attn.proj(layer.norm1(x))
    ffn = layer.ffn.layers[1](layer.ffn.layers[0](layer.norm2(h)))
    torch.testing.assert_close(layer(x, (4, 4)), h + ffn)


@pytest.mark.parametrize('backbone, kwargs', [(LiSAPVT, PVT), (LiSASwinTransformer, SWIN), (LiSAViT, VIT)])
def test_an_unregistered_type_is_refused_when_the_backbone_is_built_naming_the_valid_ones(toy, backbone, kwargs):
    with pytest.raises(ValueError, match=r"attn_cfgs\[0\]=\{'type': 'toys'\}: .*'softmax', 'toy', 'window'\]"):
        backbone(**kwargs, attn_cfgs=dict(type='toys'))


def test_registering_a_class_that_breaks_the_contract_is_refused_naming_the_missing_keywords():
    class NoContext(nn.Module):
        def __init__(self, dim, num_heads, qkv_bias=True):
            super().__init__()

    with pytest.raises(TypeError, match=r"'bad' \(NoContext\) must accept .*\['attn_drop', 'proj_drop', 'pos_shape', "
                                        r"'num_prefix_tokens', 'block_index'\]"):
        register_attention('bad')(NoContext)
    assert 'bad' not in ATTENTIONS


@pytest.mark.parametrize('name', ['softmax', 'window', 'linear', 'flatten', 'lisa'])
def test_every_built_in_type_takes_the_full_context(name):
    context = dict(zip(CONTEXT, (True, 0.0, 0.0, (4, 4), 0, 1)))
    attn = build_attention(dict(type=name), 16, 2, **context)
    assert attn(torch.randn(2, 16, 16), (4, 4)).shape == (2, 16, 16)


def test_window_attention_shifts_in_odd_blocks_and_refuses_prefix_tokens():
    shifts = [build_attention(dict(type='window', window_size=4), 8, 2, block_index=j).shift_size for j in range(4)]
    assert shifts == [0, 2, 0, 2]
    with pytest.raises(ValueError, match=r'num_prefix_tokens=1: window attention covers grid tokens only'):
        LiSAViT(**VIT, attn_cfgs=dict(type='window', window_size=2))


@pytest.mark.parametrize('cfg', ['lisaa', dict(type='lisaa', num_steps=3)], ids=['name', 'dict'])
def test_an_unknown_type_is_one_value_error_naming_it_and_the_registered_ones_wherever_it_is_checked(cfg):
    """build_attention and a backbone's attn_cfgs go through one check, so both raise the same ValueError."""
    valid = re.escape(str(sorted(ATTENTIONS)))  # every registered type, in order
    with pytest.raises(ValueError, match=rf"unknown attention type 'lisaa'; registered types: {valid}"):
        build_attention(cfg, dim=12, num_heads=3)
    if isinstance(cfg, dict):
        with pytest.raises(ValueError, match=rf"attn_cfgs\[0\]=.*unknown attention type 'lisaa'; "
                                             rf"registered types: {valid}"):
            LiSAPVT(**PVT, attn_cfgs=cfg)
