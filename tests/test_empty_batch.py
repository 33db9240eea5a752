"""A batch of zero images: every attention and every backbone returns an empty output of the right shape."""
from __future__ import annotations

import math

import pytest
import torch
from backends import BACKENDS, require

from projects.lisa.models.attention import ATTENTIONS, KernelAttention, build_attention, set_backend
from projects.lisa.models.backbones import LiSAPVT, LiSASwinTransformer, LiSAViT

ATTENTION_CFGS = [
    dict(type='softmax'),
    dict(type='softmax', sr_ratio=2),
    dict(type='linear'),
    dict(type='linear', focusing=True, dwc=True),
    dict(type='flatten'),
    dict(type='lisa'),
    dict(type='lisa', step_weights='geometric'),
    dict(type='lisa', num_steps=math.inf, step_weights='geometric'),
    dict(type='lisa', use_local=False),
    dict(type='lisa', use_global=False),
]


def build(cfg: dict, num_prefix_tokens: int, hw_shape=(4, 6), dim=16):
    kwargs = dict(pos_shape=hw_shape) if issubclass(ATTENTIONS[cfg['type']], KernelAttention) else {}
    return build_attention(cfg, dim, 2, num_prefix_tokens=num_prefix_tokens, **kwargs)


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('num_prefix_tokens', [0, 1])
@pytest.mark.parametrize('cfg', ATTENTION_CFGS, ids=str)
def test_every_attention_maps_an_empty_batch_to_an_empty_output_and_zero_gradients(cfg, num_prefix_tokens, backend):
    """Every backend of the kernel attentions' operators (the others have one path)."""
    if backend != BACKENDS[0] and not issubclass(ATTENTIONS[cfg['type']], KernelAttention):
        pytest.skip('no operator backend to choose')
    hw_shape = (4, 6)
    x = torch.randn(0, num_prefix_tokens + math.prod(hw_shape), 16, requires_grad=True)
    m = set_backend(build(cfg, num_prefix_tokens, hw_shape), require(backend, x))
    out = m(x, hw_shape)
    assert out.shape == x.shape
    out.sum().backward()
    assert x.grad.shape == x.shape
    for name, p in m.named_parameters():
        assert p.grad is not None and not p.grad.any(), name


BACKBONES = {
    'LiSAPVT': lambda: LiSAPVT(arch=dict(embed_dims=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_heads=[1, 2, 3, 4],
                                         mlp_ratios=[2, 2, 2, 2]), pretrain_img_size=64),
    'LiSASwinTransformer': lambda: LiSASwinTransformer(
        arch=dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4]), pretrain_img_size=64,
        attn_cfgs=[dict(type='lisa')] * 2 + [dict(type='window', window_size=4)] * 2),
    'LiSAViT': lambda: LiSAViT(arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
                               pretrain_img_size=32, patch_size=8, out_indices=(0, 1), out_type='featmap'),
}


@pytest.mark.parametrize('name', list(BACKBONES))
def test_every_backbone_maps_an_empty_batch_to_empty_outputs_of_the_shapes_of_a_full_one(name):
    torch.manual_seed(0)
    model = BACKBONES[name]().eval()
    with torch.no_grad():
        full = model(torch.randn(2, 3, 64, 48))
        empty = model(torch.zeros(0, 3, 64, 48))
    assert len(empty) == len(full) > 0
    for e, f in zip(empty, full):
        assert e.shape == (0, *f.shape[1:])
