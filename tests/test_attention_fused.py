"""The fused CPU kernels of the kernel attentions (``projects.lisa.models.attention.fused``) against
the plain tensor code of the reference implementation: values, gradients and the custom ops' registration."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from projects.lisa.models.attention import build_attention, fused, set_implementation
from projects.lisa.models.attention.base import focus
from projects.lisa.models.attention.layers import split_heads

pytestmark = [pytest.mark.usefixtures('seed_and_one_thread'),
              pytest.mark.skipif(fused.CPU_KERNEL is None, reason='the fused CPU kernels are not built')]


def conv_reference(x, weight, bias, hw_shape, p):
    """``nn.Conv2d(d, d, k, padding=k // 2, groups=d)`` on the grid of ``x (BH, p + H*W, d)``, prefix rows zero."""
    bh, n, d = x.shape
    grid = x[:, p:].reshape(bh, *hw_shape, d).permute(0, 3, 1, 2)
    out = F.conv2d(grid, weight, bias, padding=weight.shape[-1] // 2, groups=d).permute(0, 2, 3, 1)
    return F.pad(out.reshape(bh, n - p, d), (0, 0, p, 0))


@pytest.mark.parametrize('bh,hw_shape,d,p,k', [
    (3, (7, 5), 6, 2, 5), (2, (9, 11), 32, 0, 3), (1, (4, 4), 17, 1, 5), (2, (2, 3), 8, 0, 7), (1, (1, 1), 3, 0, 3)],
    ids=str)
def test_depthwise_conv_matches_conv2d_in_value_and_gradients(bh, hw_shape, d, p, k):
    x = torch.randn(bh, p + math.prod(hw_shape), d, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(d, 1, k, k, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(d, dtype=torch.float64, requires_grad=True)
    g = torch.randn(x.shape, dtype=torch.float64)
    got = fused.depthwise_conv(x, weight, bias, hw_shape, p)
    want = conv_reference(x, weight, bias, hw_shape, p)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got, (x, weight, bias), g), torch.autograd.grad(want, (x, weight, bias), g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_depthwise_conv_custom_op_passes_opcheck():
    """Schema, fake implementation, autograd registration and dynamic-shape tracing of ``lisa::depthwise_conv``."""
    x = torch.randn(2, 1 + 12, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.lisa.depthwise_conv, (x, weight, bias, 3, 4, 1))


def test_depthwise_conv_backward_custom_op_passes_opcheck():
    """The backward op too: its weight gradient came out as a transposed view while the fake promised a
    contiguous tensor, and inductor stopped on the stride mismatch (whole Swin, dynamic=True)."""
    x = torch.randn(2, 1 + 12, 5, dtype=torch.float64)
    weight = torch.randn(5, 1, 3, 3, dtype=torch.float64)
    torch.library.opcheck(torch.ops.lisa.depthwise_conv_backward, (torch.randn_like(x), x, weight, 3, 4, 1))


@pytest.mark.parametrize('with_pos', [True, False])
def test_kernel_features_custom_op_passes_opcheck(with_pos):
    """Schema, fake implementation, autograd registration and dynamic-shape tracing of ``lisa::kernel_features``."""
    qkv = torch.randn(2, 7, 3 * 6, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(1, 7, 6, dtype=torch.float64, requires_grad=True) if with_pos else None
    s = torch.rand(6, dtype=torch.float64, requires_grad=True) + 0.5
    torch.library.opcheck(torch.ops.lisa.kernel_features, (qkv, pos, s, 2, 3.0))


@pytest.mark.parametrize('p', [3.0, 2.0, 1.5])
def test_kernel_features_match_the_focusing_function_in_value_and_gradients(p):
    b, n, heads, d = 2, 9, 3, 4
    qkv = torch.randn(b, n, 3 * heads * d, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(1, n, heads * d, dtype=torch.float64, requires_grad=True)
    s = torch.rand(heads * d, dtype=torch.float64, requires_grad=True) + 0.5
    q, k, v = qkv.chunk(3, dim=-1)
    q, k = focus((F.relu(q) + 1e-6) / s, p), focus((F.relu(k + pos) + 1e-6) / s, p)
    want = [split_heads(t, heads) for t in (q, k, v)]
    got = fused.kernel_features(qkv, pos, s, heads, p)
    gs = [torch.randn(t.shape, dtype=torch.float64) for t in want]
    for a, b_ in zip(got, want):
        assert a.is_contiguous()
        torch.testing.assert_close(a, b_, rtol=1e-12, atol=1e-12)
    for a, b_ in zip(torch.autograd.grad(got, (qkv, pos, s), gs), torch.autograd.grad(want, (qkv, pos, s), gs)):
        torch.testing.assert_close(a, b_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('cfg', [
    dict(type='flatten'), dict(type='linear', dwc=True, dwc_kernel_size=3), dict(type='lisa'),
    dict(type='lisa', feature_map='elu', focusing=False)], ids=str)
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize('num_prefix_tokens', [0, 1])
def test_fast_implementation_matches_the_reference_in_value_and_gradients(cfg, dtype, num_prefix_tokens):
    hw_shape = (6, 5)
    fast = build_attention(cfg, 24, 3, pos_shape=(4, 4), num_prefix_tokens=num_prefix_tokens).to(dtype)
    with torch.no_grad():
        for name, p in fast.named_parameters():
            if name in ('scale', 'alpha', 'positional_encoding.weight', 'step_mlp.2.weight'):
                p.normal_(0, 0.5)
    reference = set_implementation(copy.deepcopy(fast), 'reference')
    x = torch.randn(2, num_prefix_tokens + math.prod(hw_shape), 24, dtype=dtype)
    g = torch.randn(x.shape, dtype=dtype)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    results = []
    for m in (fast, reference):
        xi = x.clone().requires_grad_()
        out = m(xi, hw_shape)
        results.append([out, *torch.autograd.grad(out, [xi, *m.parameters()], g)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **tol)


def test_set_implementation_switches_every_kernel_attention():
    model = nn.ModuleList([build_attention(dict(type=t), 12, 3) for t in ('linear', 'flatten', 'lisa')])
    set_implementation(model, 'reference')
    assert [m.implementation for m in model] == ['reference'] * 3
    set_implementation(model, 'fast')
    assert [m.implementation for m in model] == ['fast'] * 3


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize('length', [1, 3, 8, 64, 100, 4096])
def test_row_argmax_is_the_first_index_of_each_row_maximum(dtype, length):
    x = torch.randn(2, 3, 5, length, dtype=dtype)
    x[0, 0, 0] = 1.0                                     # all equal: index 0
    x[0, 0, 1, length // 2:] = x[0, 0, 1].max() + 1      # ties: the first of them
    x[1, 2, 4, -1] = x[1, 2, 4].max() + 1                # the last entry
    got = fused.row_argmax(x)
    assert got.shape == (2, 3, 5, 1) and got.dtype == torch.long
    assert torch.equal(got, x.argmax(-1, keepdim=True))
    assert got[0, 0, 1].item() == length // 2 and got[1, 2, 4].item() == length - 1


def test_row_argmax_custom_op_passes_opcheck():
    torch.library.opcheck(torch.ops.lisa.row_argmax.default, (torch.randn(4, 7, 33),))
