"""Linear angular attention (Castling-ViT's kernel, Table 5) against an explicit n x n computation in float64."""
from __future__ import annotations

import math

import attention_reference as ref
import pytest
import torch

from projects.lisa.models.attention import ATTENTIONS, AngularAttention, KernelAttention, build_attention

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


def explicit(m: AngularAttention, x: torch.Tensor, hw_shape) -> torch.Tensor:
    """``Y_i = sum_j a_ij v_j / sum_j a_ij`` with the n x n matrix ``a_ij = 1/2 + cos(q_i, k_j) / pi``."""
    c = x.shape[-1]
    qkv = x @ m.qkv.weight.T + m.qkv.bias
    q, k, v = qkv[..., :c], qkv[..., c:2 * c], qkv[..., 2 * c:]
    if m.positional_encoding is not None:
        pe = m.positional_encoding
        k = k + ref.positional_encoding(pe.weight, pe.pos_shape, hw_shape, m.num_prefix_tokens)
    q, k, v = (ref.heads(t, m.num_heads) for t in (q, k, v))
    n = q.shape[-2]
    a = torch.empty(*q.shape[:2], n, n, dtype=x.dtype)
    for i in range(n):
        for j in range(n):  # the cosine of the spectral angle, pair by pair
            qi, kj = q[:, :, i], k[:, :, j]
            cos = (qi * kj).sum(-1) / (qi.norm(dim=-1) * kj.norm(dim=-1))
            a[:, :, i, j] = 0.5 + cos / math.pi
    out = a @ v / a.sum(-1, keepdim=True)
    if m.dwc is not None:
        out = out + ref.depthwise(m, v, hw_shape)
    return ref.unheads(out) @ m.proj.weight.T + m.proj.bias


@pytest.mark.parametrize('kwargs, hw_shape', [
    (dict(), (3, 4)),
    (dict(pos_shape=(2, 3), num_prefix_tokens=1), (3, 4)),  # class token, resized positional encoding
    (dict(dwc=True, dwc_kernel_size=3), (4, 3)),
], ids=['plain', 'pos-prefix', 'dwc'])
def test_angular_attention_is_the_explicit_row_normalised_linear_angular_kernel(kwargs, hw_shape):
    m = AngularAttention(12, 3, **kwargs).double()
    if m.positional_encoding is not None:
        torch.nn.init.normal_(m.positional_encoding.weight, std=0.5)
    p = kwargs.get('num_prefix_tokens', 0)
    x = torch.randn(2, p + math.prod(hw_shape), 12, dtype=torch.float64)
    torch.testing.assert_close(m(x, hw_shape), explicit(m, x, hw_shape), rtol=1e-10, atol=1e-12)


def test_linear_angular_kernel_is_the_first_order_taylor_term_of_the_angular_kernel():
    # sim(c) = 1 - arccos(c) / pi: value and slope at c = 0 are those of 1/2 + c / pi, and the dropped
    # residual (arcsin(c) - c) / pi is odd, grows with |c| and is largest, (pi/2 - 1) / pi, at c = +-1.
    c = (torch.arange(-100, 101, dtype=torch.float64) / 100).requires_grad_()
    exact = 1 - torch.arccos(c) / math.pi
    linear = 0.5 + c / math.pi
    (slope, ) = torch.autograd.grad(exact[100], c)
    assert c[100].item() == 0 and exact[100].item() == pytest.approx(0.5) and slope[100] == pytest.approx(1 / math.pi)
    residual = (exact - linear).detach()
    torch.testing.assert_close(residual, -residual.flip(0), rtol=0, atol=1e-15)
    assert (residual[101:].diff() > 0).all()
    assert residual.abs().max().item() == pytest.approx((math.pi / 2 - 1) / math.pi)
    assert linear.min().item() == pytest.approx(0.5 - 1 / math.pi) and linear.min().item() > 0  # weights stay > 0


def test_angular_attention_is_registered_as_a_kernel_attention_and_sees_only_query_and_key_directions():
    assert ATTENTIONS['angular'] is AngularAttention and issubclass(AngularAttention, KernelAttention)
    m = build_attention(dict(type='angular'), 8, 2).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    q, _, _ = m.features(x, (2, 3))
    torch.testing.assert_close(q.norm(dim=-1), torch.ones_like(q[..., 0]))
    out = m(x, (2, 3))
    with torch.no_grad():  # queries x 3, keys x 0.5: the same angles, the same output
        m.qkv.weight[:8] *= 3
        m.qkv.bias[:8] *= 3
        m.qkv.weight[8:16] *= 0.5
        m.qkv.bias[8:16] *= 0.5
    torch.testing.assert_close(m(x, (2, 3)), out)


def test_angular_attention_is_finite_in_half_precision_on_many_tokens():
    m = AngularAttention(16, 2).half()
    x = (100 * torch.randn(1, 64 * 64, 16)).half()  # large activations, 4096 tokens
    assert torch.isfinite(m(x, (64, 64))).all()


@pytest.mark.parametrize('kwargs, message', [
    (dict(focusing=True), 'focusing=True'),
    (dict(feature_map='relu'), "feature_map='relu'"),
])
def test_angular_attention_refuses_options_that_need_non_negative_features(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AngularAttention(8, 2, **kwargs)
