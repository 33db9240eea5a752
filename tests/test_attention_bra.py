"""BiFormer's attentions against explicit n x n computations in float64.

Reference for BRA: dense softmax attention over the padded grid, masked so that a query
attends exactly to the tokens of the regions its own region routes to; the routing is
recomputed from one-hot region-membership matrices. Reference for LePE attention: the
plain n x n softmax attention plus the depthwise convolution of the input.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from projects.lisa.models.attention import ATTENTIONS, BiLevelRoutingAttention, LePEAttention, build_attention


def region_of_tokens(hp: int, wp: int, n_win: int) -> torch.Tensor:
    """Region id ``(i // rh) * S + j // rw`` of each token of the padded ``(hp, wp)`` grid, row-major."""
    rows = torch.arange(hp) // (hp // n_win)
    cols = torch.arange(wp) // (wp // n_win)
    return (rows[:, None] * n_win + cols[None, :]).flatten()


def bra_reference(attn: BiLevelRoutingAttention, x: torch.Tensor, hw_shape: tuple[int, int]) -> torch.Tensor:
    """BRA as masked dense attention; also returns the routed region sets."""
    b, n, c = x.shape
    h, w = hw_shape
    s, heads, dq = attn.n_win, attn.num_heads, attn.qk_dim
    hp, wp = -(-h // s) * s, -(-w // s) * s
    grid = x.new_zeros(b, hp, wp, c)
    grid[:, :h, :w] = x.view(b, h, w, c)
    tokens = grid.reshape(b, hp * wp, c)
    qkv = tokens @ attn.qkv.weight.T + (attn.qkv.bias if attn.qkv.bias is not None else 0)
    q, k, v = qkv[..., :dq], qkv[..., dq:2 * dq], qkv[..., 2 * dq:]
    region = region_of_tokens(hp, wp, s)
    member = F.one_hot(region, s * s).T.to(x.dtype)                          # (S^2, N')
    mean = member / member.sum(1, keepdim=True)
    region_logits = (mean @ q) @ (mean @ k).transpose(1, 2)                   # (B, S^2, S^2)
    routed = torch.zeros(b, s * s, s * s, dtype=torch.bool)
    routed.scatter_(2, region_logits.topk(attn.topk, dim=-1).indices, True)
    allowed = routed[:, region][:, :, region]                                  # (B, N', N')
    out = []
    for i in range(heads):
        qi, ki = (t[..., i * dq // heads:(i + 1) * dq // heads] for t in (q, k))
        vi = v[..., i * c // heads:(i + 1) * c // heads]
        logits = (qi @ ki.transpose(1, 2) * attn.scale).masked_fill(~allowed, float('-inf'))
        out.append(logits.softmax(-1) @ vi)
    out = torch.cat(out, -1).view(b, hp, wp, c)
    v_map = v.view(b, hp, wp, c).permute(0, 3, 1, 2)
    out = out + F.conv2d(v_map, attn.lce.weight, attn.lce.bias, padding=attn.lce.padding, groups=c).permute(0, 2, 3, 1)
    out = out @ attn.proj.weight.T + attn.proj.bias
    return out[:, :h, :w].reshape(b, n, c), routed


def lepe_reference(attn: LePEAttention, x: torch.Tensor, hw_shape: tuple[int, int]) -> torch.Tensor:
    b, n, c = x.shape
    heads = attn.num_heads
    qkv = x @ attn.qkv.weight.T + (attn.qkv.bias if attn.qkv.bias is not None else 0)
    q, k, v = qkv.split(c, -1)
    d = c // heads
    out = torch.cat([((q[..., i * d:(i + 1) * d] @ k[..., i * d:(i + 1) * d].transpose(1, 2)) / d ** 0.5)
                     .softmax(-1) @ v[..., i * d:(i + 1) * d] for i in range(heads)], -1)
    x_map = x.transpose(1, 2).reshape(b, c, *hw_shape)
    lepe = F.conv2d(x_map, attn.lepe.weight, attn.lepe.bias, padding=attn.lepe.padding, groups=c)
    return (out + lepe.flatten(2).transpose(1, 2)) @ attn.proj.weight.T + attn.proj.bias


def randomised(module: torch.nn.Module) -> torch.nn.Module:
    """float64, every parameter random (biases too, so padded tokens are not zero)."""
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module


def assert_same_forward_and_gradients(module, reference, x, hw_shape):
    x = x.clone().requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    out = module(x, hw_shape)
    params = list(module.parameters())
    ref = reference(module, x_ref, hw_shape)
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, [x, *params], grad_out)
    ref_grads = torch.autograd.grad(ref, [x_ref, *params], grad_out)
    for name, g, r in zip(['x', *(n for n, _ in module.named_parameters())], grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-10, msg=name)


# (hw_shape, n_win, topk, heads, dim, qk_dim): grids that are and are not multiples of the regions
BRA_CASES = [
    ((14, 14), 7, 4, 2, 16, None),     # 2x2-token regions, as stage 3 of BiFormer at 224 px
    ((8, 8), 4, 1, 1, 8, None),        # top-1: each region attends to one region
    ((10, 13), 4, 3, 2, 16, 8),        # padded to 12 x 16; qk narrower than v
    ((5, 3), 3, 9, 4, 16, None),       # padded to 6 x 3; every region routed
    ((2, 2), 7, 16, 2, 8, None),       # a grid smaller than the regions: padded to 7 x 7 single tokens
]


@pytest.mark.parametrize('hw_shape, n_win, topk, heads, dim, qk_dim', BRA_CASES)
def test_bra_equals_dense_attention_masked_to_the_routed_regions(seed_and_one_thread, hw_shape, n_win, topk,
                                                                  heads, dim, qk_dim):
    attn = randomised(BiLevelRoutingAttention(dim, heads, n_win=n_win, topk=topk, qk_dim=qk_dim))
    x = torch.randn(2, hw_shape[0] * hw_shape[1], dim, dtype=torch.float64)
    assert_same_forward_and_gradients(attn, bra_reference, x, hw_shape)


def test_bra_routes_each_region_to_topk_regions_by_region_mean_similarity(seed_and_one_thread):
    attn = randomised(BiLevelRoutingAttention(8, 2, n_win=4, topk=3))
    x = torch.randn(1, 64, 8, dtype=torch.float64)
    q, k, _ = attn.qkv(x.view(1, 8, 8, 8)).split(8, -1)
    regions = [q.reshape(1, 4, 2, 4, 2, 8).transpose(2, 3).reshape(1, 16, 4, 8) for q in (q, k)]
    index = attn.route(*regions)
    _, routed = bra_reference(attn, x, (8, 8))
    assert index.shape == (1, 16, 3) and not index.requires_grad
    assert torch.equal(F.one_hot(index, 16).sum(2).bool(), routed)
    # every routed region scores at least as high as every region left out
    scores = (regions[0].mean(2) @ regions[1].mean(2).transpose(1, 2))[0]
    for i in range(16):
        chosen = scores[i, routed[0, i]]
        assert chosen.min() >= scores[i, ~routed[0, i]].max()


def test_bra_with_every_region_routed_is_global_attention_over_the_padded_grid(seed_and_one_thread):
    attn = randomised(BiLevelRoutingAttention(8, 2, n_win=2, topk=4))
    x = torch.randn(1, 16, 8, dtype=torch.float64)
    dense = LePEAttention(8, 2, qkv_bias=True).double()
    with torch.no_grad():
        dense.qkv.load_state_dict(attn.qkv.state_dict())
        dense.proj.load_state_dict(attn.proj.state_dict())
    # global attention with scale 1/sqrt(qk_dim) (BRA's) instead of 1/sqrt(head dim)
    dense_out = F.scaled_dot_product_attention(
        *(t.view(1, 16, 2, 4).transpose(1, 2) for t in attn.qkv(x).split(8, -1)), scale=8 ** -0.5)
    lce = attn.lce(attn.qkv(x)[..., 16:].transpose(1, 2).reshape(1, 8, 4, 4)).flatten(2).transpose(1, 2)
    expected = attn.proj(dense_out.transpose(1, 2).reshape(1, 16, 8) + lce)
    torch.testing.assert_close(attn(x, (4, 4)), expected)


@pytest.mark.parametrize('hw_shape, heads, bias', [((7, 7), 8, False), ((3, 5), 2, True)])
def test_lepe_attention_equals_softmax_attention_plus_a_depthwise_conv_of_the_input(seed_and_one_thread, hw_shape,
                                                                                    heads, bias):
    attn = randomised(LePEAttention(16, heads, qkv_bias=bias))
    assert (attn.qkv.bias is not None) == bias
    x = torch.randn(2, hw_shape[0] * hw_shape[1], 16, dtype=torch.float64)
    assert_same_forward_and_gradients(attn, lepe_reference, x, hw_shape)


def test_bra_default_scale_is_the_official_qk_dim_not_the_head_width():
    attn = BiLevelRoutingAttention(64, 2)
    assert attn.scale == 64 ** -0.5 and attn.qk_dim == 64
    assert BiLevelRoutingAttention(64, 2, qk_dim=32, qk_scale=0.1).scale == 0.1


def test_both_are_built_by_name_through_the_common_factory():
    assert ATTENTIONS['bra'] is BiLevelRoutingAttention and ATTENTIONS['lepe'] is LePEAttention
    attn = build_attention(dict(type='bra', n_win=8, topk=16), 64, 2, qkv_bias=True, proj_drop=0.0, attn_drop=0.0)
    assert (attn.n_win, attn.topk, attn.num_heads) == (8, 16, 2)
    # parameters: qkv (C -> 2 qk + C), LCE 5x5 depthwise, output projection
    assert sum(p.numel() for p in attn.parameters()) == (64 * 192 + 192) + (64 * 25 + 64) + (64 * 64 + 64)


@pytest.mark.parametrize('kwargs, message', [
    (dict(topk=50), 'topk=50 must be in [1, n_win^2 = 49]'),
    (dict(topk=0), 'topk=0'),
    (dict(n_win=0), 'n_win=0'),
    (dict(lce_kernel_size=4), 'lce_kernel_size=4'),
    (dict(qk_dim=15), 'num_heads=2 must be a positive divisor of dim=15'),
    (dict(attn_drop=1.0), 'attn_drop=1.0'),
])
def test_bra_refuses_invalid_settings_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace('[', r'\[').replace('^', r'\^')):
        BiLevelRoutingAttention(16, 2, **kwargs)


def test_bra_refuses_tokens_that_do_not_match_the_grid():
    with pytest.raises(ValueError, match=r'N=10 tokens do not match hw_shape=\(3, 3\)'):
        BiLevelRoutingAttention(8, 2, n_win=3, topk=2)(torch.randn(1, 10, 8), (3, 3))


@pytest.mark.parametrize('cls', [BiLevelRoutingAttention, LePEAttention])
def test_prefix_tokens_are_refused(cls):
    with pytest.raises(ValueError, match='num_prefix_tokens=1'):
        cls(16, 2, num_prefix_tokens=1)
