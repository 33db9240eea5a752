"""Softmax, linear and FLatten baselines against explicit float64 formulas."""
from __future__ import annotations

import math

import attention_reference as ref
import pytest
import torch
from torch import nn

from projects.lisa.models.attention import (
    FocusedLinearAttention,
    LinearAttention,
    SoftmaxAttention,
    build_attention,
    register_attention,
)
from projects.lisa.models.attention.ops import focus

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


def randomise(m: nn.Module) -> nn.Module:
    """Random values for the zero-initialised parameters (focusing scale, positional encoding)."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name in ('scale', 'positional_encoding.weight'):
                p.normal_(0, 0.5)
            elif name.startswith('norm.'):
                p.add_(torch.randn_like(p))
    return m.double()


def tokens(batch: int, hw_shape, num_prefix_tokens: int = 0, dim: int = 12) -> torch.Tensor:
    return torch.randn(batch, num_prefix_tokens + math.prod(hw_shape), dim, dtype=torch.float64)


@pytest.mark.parametrize('sr_ratio,hw_shape,num_prefix_tokens', [
    (1, (3, 5), 0), (1, (2, 2), 1), (2, (4, 6), 0), (2, (4, 6), 1), (3, (3, 6), 2)])
def test_softmax_attention_is_explicit_softmax_of_scaled_scores(sr_ratio, hw_shape, num_prefix_tokens):
    m = randomise(SoftmaxAttention(12, 3, sr_ratio=sr_ratio, num_prefix_tokens=num_prefix_tokens))
    x = tokens(2, hw_shape, num_prefix_tokens)
    torch.testing.assert_close(m(x, hw_shape), ref.softmax(m, x, hw_shape), rtol=1e-10, atol=1e-12)


def test_softmax_attention_equals_torch_multihead_attention():
    m = SoftmaxAttention(12, 3).double()
    mha = nn.MultiheadAttention(12, 3, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(m.qkv.weight)
        mha.in_proj_bias.copy_(m.qkv.bias)
        mha.out_proj.weight.copy_(m.proj.weight)
        mha.out_proj.bias.copy_(m.proj.bias)
    x = tokens(2, (3, 4))
    torch.testing.assert_close(m(x, (3, 4)), mha(x, x, x, need_weights=False)[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('kwargs', [
    dict(), dict(focusing=True, dwc=True, pos_shape=(3, 5)), dict(feature_map='elu', eps=0.1),
    dict(focusing=True, focusing_factor=2.0, num_prefix_tokens=1, dwc=True, dwc_kernel_size=3)], ids=str)
def test_linear_attention_is_one_explicit_hop(kwargs):
    hw_shape = (3, 5)
    m = randomise(LinearAttention(12, 3, **kwargs))
    x = tokens(2, hw_shape, m.num_prefix_tokens)
    torch.testing.assert_close(m(x, hw_shape), ref.linear(m, x, hw_shape), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize('hw_shape,num_prefix_tokens', [((5, 5), 0), ((4, 7), 0), ((3, 4), 1)])
def test_flatten_matches_the_published_formula(hw_shape, num_prefix_tokens):
    m = randomise(FocusedLinearAttention(12, 3, pos_shape=hw_shape, num_prefix_tokens=num_prefix_tokens))
    x = tokens(2, hw_shape, num_prefix_tokens)
    torch.testing.assert_close(m(x, hw_shape), ref.flatten(m, x, hw_shape), rtol=1e-8, atol=1e-10)


def test_flatten_defaults_are_the_published_setting():
    m = FocusedLinearAttention(12, 3)
    assert (m.focusing_factor, m.feature_map, m.dwc.kernel_size, m.dwc.groups) == (3.0, 'relu', (5, 5), 4)
    assert m.scale.shape == (1, 1, 12)


def test_focusing_function_is_exact_and_stays_finite_in_fp16():
    """``f_p(x) = ||x|| / ||x^p|| x^p``: for x ~ 100, x^3 exceeds fp16's 65504."""
    x = 100 * torch.rand(4, 16, dtype=torch.float64) + 1e-6
    expected = x.norm(dim=-1, keepdim=True) / (x ** 3).norm(dim=-1, keepdim=True) * x ** 3
    torch.testing.assert_close(focus(x, 3.0), expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(focus(x.half(), 3.0).double(), expected, rtol=4e-3, atol=1e-3)


@pytest.mark.parametrize('name,cls', [
    ('softmax', SoftmaxAttention), ('linear', LinearAttention), ('flatten', FocusedLinearAttention)])
def test_build_attention_by_name_lets_cfg_override_defaults(name, cls):
    m = build_attention(dict(type=name, num_prefix_tokens=2), dim=12, num_heads=3, num_prefix_tokens=1)
    assert type(m) is cls and m.num_prefix_tokens == 2
    assert type(build_attention(name, dim=12, num_heads=3)) is cls


def test_registering_a_taken_name_raises():
    with pytest.raises(KeyError, match="attention 'softmax' is already registered"):
        register_attention('softmax')(SoftmaxAttention)


@pytest.mark.parametrize('cls,kwargs,message', [
    (SoftmaxAttention, dict(sr_ratio=0), 'sr_ratio=0'),
    (SoftmaxAttention, dict(attn_drop=1.0), r'attn_drop=1.0 must be in \[0, 1\)'),
    (SoftmaxAttention, dict(num_heads=5), 'num_heads=5 must be a positive divisor of dim=12'),
    (LinearAttention, dict(num_heads=0), 'num_heads=0 must be a positive divisor of dim=12'),
    (LinearAttention, dict(feature_map='softmax'), "feature_map='softmax'"),
    (FocusedLinearAttention, dict(focusing_factor=0.0), 'focusing_factor=0.0'),
    (FocusedLinearAttention, dict(dwc_kernel_size=0), 'dwc_kernel_size=0'),
    (FocusedLinearAttention, dict(pos_shape=(3,)), r'pos_shape must be two positive ints \(H, W\), got \(3,\)'),
], ids=str)
def test_invalid_arguments_raise_naming_the_value(cls, kwargs, message):
    kwargs = {'num_heads': 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        cls(12, **kwargs)


@pytest.mark.parametrize('name', ['softmax', 'linear', 'flatten'])
def test_token_count_must_match_the_grid(name):
    m = build_attention(name, dim=12, num_heads=3)
    with pytest.raises(ValueError, match=r'N=13 tokens do not match hw_shape=\(3, 4\) with 0 prefix'):
        m(torch.randn(1, 13, 12), (3, 4))
