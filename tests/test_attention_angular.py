"""Linear angular attention (Castling-ViT's kernel, Table 5), both forms against explicit n x n computations in
float64: the row-normalised kernel and Castling-ViT's published module (own value, per-token L2 norm, 9 x 1
depthwise conv over the token sequence)."""
from __future__ import annotations

import math

import attention_reference as ref
import pytest
import torch

from projects.lisa.benchmarks.flops import model_complexity
from projects.lisa.models.attention import ATTENTIONS, AngularAttention, KernelAttention, build_attention
from projects.lisa.models.backbones import LiSAViT

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


def projections(m: AngularAttention, x: torch.Tensor, hw_shape):
    """``q, k (+ positional encoding), v`` per head, ``(B, h, N, d)``."""
    c = x.shape[-1]
    qkv = x @ m.qkv.weight.T + m.qkv.bias
    q, k, v = qkv[..., :c], qkv[..., c:2 * c], qkv[..., 2 * c:]
    if m.positional_encoding is not None:
        pe = m.positional_encoding
        k = k + ref.positional_encoding(pe.weight, pe.pos_shape, hw_shape, m.num_prefix_tokens)
    return tuple(ref.heads(t, m.num_heads) for t in (q, k, v))


def linear_angular_kernel(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The n x n matrix ``a_ij = 1/2 + cos(q_i, k_j) / pi``, pair by pair."""
    n = q.shape[-2]
    a = torch.empty(*q.shape[:2], n, n, dtype=q.dtype)
    for i in range(n):
        for j in range(n):  # the cosine of the spectral angle
            qi, kj = q[:, :, i], k[:, :, j]
            cos = (qi * kj).sum(-1) / (qi.norm(dim=-1) * kj.norm(dim=-1))
            a[:, :, i, j] = 0.5 + cos / math.pi
    return a


def explicit(m: AngularAttention, x: torch.Tensor, hw_shape) -> torch.Tensor:
    """``Y_i = sum_j a_ij v_j / sum_j a_ij`` with the n x n matrix ``a`` of :func:`linear_angular_kernel`."""
    q, k, v = projections(m, x, hw_shape)
    a = linear_angular_kernel(q, k)
    out = a @ v / a.sum(-1, keepdim=True)
    if m.dwc is not None:
        out = out + ref.depthwise(m, v, hw_shape)
    return ref.unheads(out) @ m.proj.weight.T + m.proj.bias


def explicit_castling(m: AngularAttention, x: torch.Tensor, hw_shape) -> torch.Tensor:
    """Castling-ViT's module: ``u = (a - 1/2 + 1/2 I) V``, ``Y_i = u_i / ||u_i|| + sum_j c_ij v_j`` per head,
    with ``c`` the n x n banded matrix of the sequence convolution, ``c_ij = w[j - i + s // 2]`` for
    ``|j - i| <= s // 2`` over all N tokens (prefix tokens first), 0 elsewhere."""
    q, k, v = projections(m, x, hw_shape)
    n = q.shape[-2]
    u = (linear_angular_kernel(q, k) - 0.5 + 0.5 * torch.eye(n, dtype=x.dtype)) @ v
    w = m.seq_conv.weight[:, 0, :, 0]  # (h, s): one kernel per head
    s = w.shape[-1]
    c = torch.zeros(m.num_heads, n, n, dtype=x.dtype)
    for i in range(n):
        for j in range(max(0, i - s // 2), min(n, i + s // 2 + 1)):
            c[:, i, j] = w[:, j - i + s // 2]
    out = u / u.norm(dim=-1, keepdim=True) + c @ v
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
    (dict(form='castling', dwc=True), "dwc=True is not valid with form='castling'"),
    (dict(form='castling', seq_kernel_size=4), 'seq_kernel_size=4 must be a positive odd int'),
    (dict(form='castlingvit'), r"form='castlingvit' is not one of \('kernel', 'castling'\)"),
    (dict(seq_kernel_size=9), "seq_kernel_size=9 is only valid with form='castling'"),
])
def test_angular_attention_refuses_options_that_need_non_negative_features(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AngularAttention(8, 2, **kwargs)


@pytest.mark.parametrize('kwargs, hw_shape', [
    (dict(), (3, 4)),  # 12 tokens: the 9-tap kernel reaches both ends of the sequence
    (dict(pos_shape=(2, 3), num_prefix_tokens=1), (3, 4)),  # the class token is the sequence's first token
    (dict(num_prefix_tokens=2, seq_kernel_size=3), (2, 5)),
], ids=['plain', 'pos-prefix', 'two-prefix-k3'])
def test_castling_form_is_the_explicit_own_value_l2_normalised_kernel_plus_a_sequence_conv(kwargs, hw_shape):
    m = AngularAttention(12, 3, form='castling', **kwargs).double()
    if m.positional_encoding is not None:
        torch.nn.init.normal_(m.positional_encoding.weight, std=0.5)
    p = kwargs.get('num_prefix_tokens', 0)
    x = torch.randn(2, p + math.prod(hw_shape), 12, dtype=torch.float64)
    torch.testing.assert_close(m(x, hw_shape), explicit_castling(m, x, hw_shape), rtol=1e-10, atol=1e-12)


def test_castling_form_has_castlings_sequence_conv_and_the_kernel_form_stays_the_default():
    castling = build_attention(dict(type='angular', form='castling'), 16, 4)
    # Castling-ViT's LinAngularAttention: Conv2d(heads, heads, (9, 1), groups=heads, bias=False) on v (B, h, N, d)
    assert tuple(castling.seq_conv.weight.shape) == (4, 1, 9, 1) and castling.seq_conv.bias is None
    assert castling.dwc is None
    kernel = build_attention(dict(type='angular'), 16, 4)
    assert kernel.form == 'kernel' and kernel.seq_conv is None
    assert {n for n, _ in castling.named_parameters()} - {n for n, _ in kernel.named_parameters()} == {
        'seq_conv.weight'}


def test_castling_output_token_has_unit_norm_per_head_before_the_conv():
    m = AngularAttention(8, 2, form='castling').double()
    torch.nn.init.zeros_(m.seq_conv.weight)
    m.proj = torch.nn.Identity()
    x = torch.randn(3, 10, 8, dtype=torch.float64)
    out = m(x, (2, 5)).view(3, 10, 2, 4)  # (B, N, h, d)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(3, 10, 2, dtype=torch.float64))


def test_castling_form_in_a_vit_trains_every_parameter_with_the_class_token():
    model = LiSAViT(arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), pretrain_img_size=32,
                    patch_size=8, attn_cfgs=dict(type='angular', form='castling', pos_shape=None), out_type='cls_token')
    assert all(layer.attn.form == 'castling' and layer.attn.positional_encoding is None for layer in model.layers)
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    (out, ) = model(x)
    assert out.shape == (2, 16)
    out.square().sum().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, n


def test_flop_count_of_the_castling_form_adds_the_sequence_conv_to_the_kernel_forms():
    """Both forms compute ``K^T V`` and ``q (K^T V)``; the Castling form adds s multiply-adds per value entry."""
    b, n, c, s = 2, 1 + 4 * 4, 16, 9

    class Fixed(torch.nn.Module):
        def __init__(self, attn):
            super().__init__()
            self.attn = attn

        def forward(self, x):
            return self.attn(x, (4, 4))

    x = torch.randn(b, n, c)
    counts = {form: model_complexity(Fixed(AngularAttention(c, 2, form=form, num_prefix_tokens=1)), (x, ))
              for form in ('kernel', 'castling')}
    # qkv (3c outputs) and proj (c); per head K^T V (d x n x d) and q (K^T V) (n x d x d), h d = c
    assert counts['kernel'].flops == b * n * c * 4 * c + 2 * b * n * c * (c // 2)
    assert counts['castling'].flops - counts['kernel'].flops == b * n * c * s


def test_castling_form_exports_and_matches_eager():
    m = AngularAttention(16, 2, form='castling', num_prefix_tokens=1, pos_shape=(4, 4)).eval()
    x = torch.randn(2, 17, 16)
    exported = torch.export.export(m, (x, (4, 4)))
    torch.testing.assert_close(exported.module()(x, (4, 4)), m(x, (4, 4)))


def test_castling_form_is_finite_in_half_precision_on_many_tokens():
    m = AngularAttention(16, 2, form='castling').half()
    x = (100 * torch.randn(1, 64 * 64, 16)).half()
    assert torch.isfinite(m(x, (64, 64))).all()
