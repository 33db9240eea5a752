"""LiSA against a brute-force float64 reference (explicit S, its powers, its inverse)."""
from __future__ import annotations

import copy
import math

import attention_reference as ref
import pytest
import torch
from backends import BACKENDS, FAST, require
from torch import nn
from torch.func import functional_call

from projects.lisa.benchmarks.attention import allocated_peak_bytes, setup
from projects.lisa.models.attention import LiSAAttention, build_attention, set_backend
from projects.lisa.models.attention.layers import PositionalEncoding
from projects.lisa.models.attention.ops import (
    geometric_weights,
    neighbourhood,
    random_walk,
    random_walk_reference,
    transition_factors,
    walk,
)


def randomise(m: nn.Module) -> nn.Module:
    """Give the zero-initialised parameters random values so that every path is exercised."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name in ('scale', 'alpha', 'positional_encoding.weight', 'step_mlp.2.weight'):
                p.normal_(0, 0.5)
            elif name == 'step_mlp.2.bias':
                p.add_(torch.randn_like(p))
    return m


def lisa64(hw_shape, num_prefix_tokens=0, dim=12, num_heads=3, **kwargs) -> LiSAAttention:
    m = LiSAAttention(dim, num_heads, pos_shape=hw_shape, num_prefix_tokens=num_prefix_tokens, **kwargs)
    return randomise(m.double())


def tokens(batch: int, hw_shape, num_prefix_tokens: int = 0, dim: int = 12) -> torch.Tensor:
    return torch.randn(batch, num_prefix_tokens + math.prod(hw_shape), dim, dtype=torch.float64)


pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


@pytest.mark.parametrize('hw_shape,num_prefix_tokens', [((5, 7), 0), ((3, 3), 1), ((1, 4), 2)])
@pytest.mark.parametrize('step_weights', ['adaptive', 'geometric'])
@pytest.mark.parametrize('num_steps', range(1, 8))
def test_lisa_matches_explicit_walk_local_and_fusion(num_steps, step_weights, hw_shape, num_prefix_tokens):
    m = lisa64(hw_shape, num_prefix_tokens, num_steps=num_steps, step_weights=step_weights, beta=0.6)
    x = tokens(2, hw_shape, num_prefix_tokens)
    torch.testing.assert_close(m(x, hw_shape), ref.lisa(m, x, hw_shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('kwargs', [
    dict(use_local=False),
    dict(use_global=False),
    dict(focusing=False, dwc=False),
    dict(feature_map='elu', focusing_factor=2.0, dwc_kernel_size=3),
    dict(local_kernel_size=5, step_mlp_hidden=7),
    dict(num_steps=math.inf, step_weights='geometric', beta=0.9),
    dict(num_steps='inf', step_weights='geometric', beta=0.3, eps=0.1),
    dict(num_steps=4, step_weights='geometric', beta=0.0),
], ids=str)
@pytest.mark.parametrize('backend', BACKENDS)
def test_lisa_variants_match_reference(kwargs, backend):
    hw_shape = (4, 5)
    m = lisa64(hw_shape, 1, backend=require(backend, torch.empty(0, dtype=torch.float64)), **kwargs)
    x = tokens(2, hw_shape, 1)
    torch.testing.assert_close(m(x, hw_shape), ref.lisa(m, x, hw_shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('backend', FAST)
@pytest.mark.parametrize('kwargs', [
    dict(num_steps=3),
    dict(num_steps=4, step_weights='geometric', eps=0.5),
    dict(num_steps=5, use_local=False),
    dict(num_steps=2, use_global=False, local_kernel_size=5),
    dict(num_steps=math.inf, step_weights='geometric'),
], ids=str)
def test_fast_backends_match_the_reference_forward_and_gradients(kwargs, backend, monkeypatch):
    """'cpu_kernel' and 'torch' (custom ops: analytic walk backward, the CPU kernels or the tensor
    operations, the local branch's in CPU row blocks) against 'reference' (plain autograd code):
    output, input and parameter gradients in float64."""
    monkeypatch.setattr(neighbourhood, 'CPU_BLOCK_ELEMENTS', 24)
    hw_shape = (4, 3)
    x = tokens(2, hw_shape, 1, dim=8).requires_grad_()
    fast = lisa64(hw_shape, 1, dim=8, num_heads=2, backend=require(backend, x), **kwargs)
    reference = set_backend(copy.deepcopy(fast), 'reference')
    outs = [m(x, hw_shape) for m in (fast, reference)]
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    g = torch.randn_like(outs[0])
    grads = [torch.autograd.grad(out, [x, *m.parameters()], g) for out, m in zip(outs, (fast, reference))]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('dwc', [True, False])
@pytest.mark.parametrize('backend', FAST)
@pytest.mark.parametrize('step_weights', ['adaptive', 'geometric'])
def test_fast_backends_add_the_branches_gradients_in_place(step_weights, backend, dwc):
    """q, k and v each feed several branches (walk, local branch, step MLP; v the depthwise conv).
    Autograd sums their gradients in place only where the first to arrive is a tensor it alone
    holds, not a view of a reshaped one: the custom ops' backward makes no new token-sized sum.
    The one exception: 'torch' has no depthwise op, and ``F.conv2d``'s gradient of v arrives as a view."""
    hw_shape = (6, 5)
    m = LiSAAttention(8, 2, step_weights=step_weights, pos_shape=hw_shape, dwc=dwc,
                      backend=require(backend, torch.empty(0)))
    out = m(torch.randn(2, 30, 8, requires_grad=True), hw_shape)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        out.sum().backward()
    sums = [e.name for e in prof.events()
            if e.name in ('aten::add', 'aten::add_') and e.input_shapes and tuple(e.input_shapes[0]) == (2, 2, 30, 4)]
    # q and k: 1 or 2 sums each (the step MLP adds one), v: 1 or 2 (walk, local branch, depthwise conv)
    count = (4 if step_weights == 'adaptive' else 2) + (2 if dwc else 1)
    copies = 1 if backend == 'torch' and dwc else 0
    assert sorted(sums) == ['aten::add'] * copies + ['aten::add_'] * (count - copies)


@pytest.mark.parametrize('backend', FAST)
@pytest.mark.parametrize('weights_shape', [(4,), (1, 3, 1, 4), (2, 3, 17, 4)], ids=str)
@pytest.mark.parametrize('eps', [1e-6, 0.5])
def test_walk_custom_op_matches_the_reference_and_the_reference_explicit_powers(weights_shape, eps, backend):
    """Fixed, per-head and per-token step weights: the reference against ``sum_t w_t S^t V``
    with the explicit n x n ``S``, the custom op's output and analytic gradients against the
    reference's autograd, with the token-wise passes by the CPU kernels ('cpu_kernel') and by
    tensor operations ('torch', as on CUDA)."""
    q, k = 3 * torch.rand(2, 3, 17, 5, dtype=torch.float64), torch.rand(2, 3, 17, 5, dtype=torch.float64)
    v = torch.randn(2, 3, 17, 6, dtype=torch.float64)
    w = torch.rand(weights_shape, dtype=torch.float64).softmax(-1)
    args = [t.requires_grad_() for t in (q, k, v, w)]
    reference = random_walk_reference(*args, eps)
    explicit = ref.walk(ref.transition_matrix(q, k, eps), v, w.expand(2, 3, 17, 4))
    torch.testing.assert_close(reference, explicit, rtol=1e-12, atol=1e-12)
    fast = random_walk(*args, eps, backend=require(backend, *args))
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, args, g), torch.autograd.grad(reference, args, g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('backend', FAST)
@pytest.mark.parametrize('weights_shape', [(2, 3, 17, 4), (1, 3, 17, 4)], ids=str)
@pytest.mark.parametrize('block_elements', [1, 40, 700])
def test_walk_in_token_blocks_matches_the_reference(block_elements, weights_shape, backend, monkeypatch):
    """Per-token weights (also broadcast over the batch): the hops and their gradients built block by
    block, 1: one token per block; 40: two or three tokens of one batch-head; 700: two whole
    batch-heads (17 tokens x 18 or 15 per token). Output and gradients against the reference."""
    monkeypatch.setattr(walk, 'BLOCK_ELEMENTS', block_elements)
    q, k = 3 * torch.rand(2, 3, 17, 5, dtype=torch.float64), torch.rand(2, 3, 17, 5, dtype=torch.float64)
    v = torch.randn(2, 3, 17, 6, dtype=torch.float64)
    w = torch.rand(weights_shape, dtype=torch.float64).softmax(-1)
    args = [t.requires_grad_() for t in (q, k, v, w)]
    reference = random_walk_reference(*args, 1e-3)
    fast = random_walk(*args, 1e-3, backend=require(backend, *args))
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, args, g), torch.autograd.grad(reference, args, g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('backend', FAST)
def test_lisa_layer_peak_memory_is_at_most_1_35_times_flattens(backend):
    """One DeiT-T layer (C = 192, 3 heads) on 128 x 128 + 1 tokens, forward+backward: the peak of the
    bytes allocated (every allocation, from the profiler: deterministic) is at most 1.35x FLatten's
    with the same backend. The bound catches the walk's (T - 1)-fold hops and their gradients held for
    all tokens at once, the local branch's gradients of q, k, v kept alive during the walk's backward and
    a copy of the branches' gradient per operator (together 1.77x with the CPU kernels, 1.44x with
    'torch')."""
    require(backend, torch.empty(0))
    peak = {method: allocated_peak_bytes(*setup(method, 16385, 192, 3, 1, torch.device('cpu'), backend))
            for method in ('flatten', 'lisa')}
    assert peak['lisa'] <= 1.35 * peak['flatten'], {m: p / 2**20 for m, p in peak.items()}


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32], ids=str)
def test_walk_cpu_kernels_equal_the_tensor_ops_with_all_zero_features(dtype):
    """An all-zero q_i (ReLU) and an all-zero K (one batch-head) stay zero and get zero or finite
    gradients the same way in the CPU kernels and in the tensor operations; 130 tokens span two
    row blocks of the kernels."""
    q, k = torch.rand(2, 3, 130, 8, dtype=dtype), torch.rand(2, 3, 130, 8, dtype=dtype)
    q[0, 1, 5], k[1, 2] = 0, 0
    v, w = torch.randn(2, 3, 130, 8, dtype=dtype), torch.rand(2, 3, 130, 3, dtype=dtype).softmax(-1)
    g = torch.randn(2, 3, 130, 8, dtype=dtype)
    results = []
    for backend in FAST:
        args = [t.clone().requires_grad_() for t in (q, k, v, w)]
        out = random_walk(*args, 1e-3, backend=require(backend, *args))
        results.append([out, *torch.autograd.grad(out, args, g)])
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for a, b in zip(*results):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize('kernels', [False, True])
@pytest.mark.parametrize('weights_shape', [(1, 1, 1, 3), (1, 2, 5, 3)], ids=str)
def test_walk_custom_op_passes_opcheck(weights_shape, kernels):
    """Schema, fake implementation (every output's shape, stride and dtype), autograd
    registration and dynamic-shape tracing of ``lisa::random_walk``, with and without its CPU kernel passes."""
    q, k, v = (torch.rand(1, 2, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    w = torch.rand(weights_shape, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.lisa.random_walk, (q, k, v, w, 1e-3, kernels))


def test_set_backend_switches_every_lisa_module_and_refuses_unknown_names():
    model = nn.Sequential(LiSAAttention(12, 3), nn.ModuleList([nn.Linear(2, 2), LiSAAttention(12, 3, num_steps=2)]))
    lisa = [m for m in model.modules() if isinstance(m, LiSAAttention)]
    assert [m.backend for m in lisa] == [None, None]
    assert set_backend(model, 'reference') is model
    assert [m.backend for m in lisa] == ['reference', 'reference']
    set_backend(model, 'torch')
    assert [m.backend for m in lisa] == ['torch', 'torch']
    with pytest.raises(ValueError, match=r"backend='fast' is not one of \['auto', 'reference', 'torch', "
                                         r"'cpu_kernel'\]"):
        set_backend(model, 'fast')
    assert [m.backend for m in lisa] == ['torch', 'torch']


def test_untruncated_walk_is_the_limit_of_the_truncated_walk():
    hw_shape = (3, 4)
    inf = lisa64(hw_shape, num_steps=math.inf, step_weights='geometric', use_local=False, beta=0.5)
    long = lisa64(hw_shape, num_steps=60, step_weights='geometric', use_local=False, beta=0.5)
    long.load_state_dict(inf.state_dict())
    x = tokens(1, hw_shape)
    torch.testing.assert_close(long(x, hw_shape), inf(x, hw_shape), rtol=1e-12, atol=1e-12)


def test_positional_encoding_is_resized_bicubically_to_a_new_grid():
    hw_shape, pos_shape = (5, 7), (4, 3)
    m = lisa64(pos_shape, 1)
    x = tokens(2, hw_shape, 1)
    torch.testing.assert_close(m(x, hw_shape), ref.lisa(m, x, hw_shape), rtol=1e-6, atol=1e-6)
    pe = m.positional_encoding
    torch.testing.assert_close(pe((6, 2)), ref.positional_encoding(pe.weight, pos_shape, (6, 2), 1))


def test_positional_encoding_is_exact_at_its_own_size():
    pe = PositionalEncoding(8, (3, 5), num_prefix_tokens=1)
    nn.init.normal_(pe.weight)
    assert torch.equal(pe((3, 5)), pe.weight)
    const = PositionalEncoding(8, (3, 5))
    nn.init.constant_(const.weight, 2.5)
    torch.testing.assert_close(const((7, 4)), torch.full((1, 28, 8), 2.5))


@pytest.mark.parametrize('eps', [1e-6, 0.3])
def test_transition_matrix_is_explicit_s_and_rows_sum_to_one_up_to_eps(eps):
    q, k = torch.rand(2, 3, 17, 4, dtype=torch.float64), torch.rand(2, 3, 17, 4, dtype=torch.float64)
    q[0, 0, 3] = 0  # an all-zero ReLU feature row
    q_hat, k_bar = transition_factors(q * 1e3, k * 1e-3, eps)
    s = q_hat @ k_bar.transpose(-2, -1)
    torch.testing.assert_close(s, ref.transition_matrix(q, k, eps), rtol=1e-12, atol=1e-15)
    assert (s >= 0).all()
    deficit = 1 - s.sum(-1)
    n = k.shape[-2]
    eps_term = eps * n * q.amax(-1) * k.amax((-2, -1))[..., None]
    expected = eps_term / ((q @ k.transpose(-2, -1)).sum(-1) + eps_term)
    expected[0, 0, 3] = 1  # zero row: no transition at all
    torch.testing.assert_close(deficit, expected, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize('per_token', [False, True])
def test_walk_keeps_constant_values_constant(per_token):
    """S is row-stochastic, so every S^k maps a constant V to itself (up to eps)."""
    q, k = torch.rand(2, 3, 17, 4, dtype=torch.float64), torch.rand(2, 3, 17, 4, dtype=torch.float64)
    v = torch.full((2, 3, 17, 5), 2.5, dtype=torch.float64)
    weights = torch.rand(2, 3, 17, 4, dtype=torch.float64).softmax(-1) if per_token else geometric_weights(0.7, 4)
    torch.testing.assert_close(random_walk(q, k, v, weights, eps=1e-12), v, rtol=1e-9, atol=0)


def test_zero_feature_token_has_finite_output():
    hw_shape = (3, 3)
    m = lisa64(hw_shape, focusing=False, dwc=False)
    x = tokens(1, hw_shape)
    with torch.no_grad():
        m.qkv.bias[:12] = -100.0  # q = ReLU(.) = 0 for every token
    out = m(x, hw_shape)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref.lisa(m, x, hw_shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('kwargs', [
    dict(num_steps=3, step_weights='adaptive'),
    dict(num_steps=2, step_weights='geometric', eps=0.5),
    dict(num_steps=4, step_weights='geometric', use_local=False),
    dict(num_steps=5, step_weights='adaptive', use_local=False, eps=0.5),
    dict(num_steps=math.inf, step_weights='geometric', eps=0.5),
], ids=str)
def test_gradients_match_finite_differences(kwargs):
    hw_shape = (2, 3)
    m = lisa64(hw_shape, 1, dim=8, num_heads=2, dwc_kernel_size=3, **kwargs)
    names, params = zip(*m.named_parameters())
    x = tokens(2, hw_shape, 1, dim=8).requires_grad_()

    def f(x, *params):
        return functional_call(m, dict(zip(names, params)), (x, hw_shape))

    assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)


@pytest.mark.parametrize('block_elements', [1, 24])
def test_local_branch_in_cpu_blocks_matches_reference_and_finite_differences(block_elements, monkeypatch):
    """The tensor-operation path's CPU blocks. 1: one (batch, head) and one grid row per block;
    24: two rows of a 3-wide, d = 4 grid."""
    monkeypatch.setattr(neighbourhood, 'CPU_BLOCK_ELEMENTS', block_elements)
    hw_shape = (5, 3)
    m = lisa64(hw_shape, 1, dim=8, num_heads=2, dwc_kernel_size=3, num_steps=2, backend='torch')
    x = tokens(2, hw_shape, 1, dim=8).requires_grad_()
    torch.testing.assert_close(m(x, hw_shape), ref.lisa(m, x, hw_shape), rtol=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(lambda x: m(x, hw_shape), (x,), fast_mode=True)


def rounded(m: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A float32 copy of ``m`` whose parameters are rounded to ``dtype``."""
    m = copy.deepcopy(m)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.to(dtype).float())
    return m


@pytest.fixture(scope='module')
def large_activations():
    """N = 65,536 tokens (256 x 256) with activations ~100x a unit normal, and the float32 output."""
    torch.manual_seed(0)
    hw_shape = (256, 256)
    m = randomise(LiSAAttention(32, 2, num_steps=3, pos_shape=(16, 16)))
    x = 100 * torch.randn(1, math.prod(hw_shape), 32)
    with torch.no_grad():
        return m, x, hw_shape, m(x, hw_shape)


@pytest.mark.slow
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_low_precision_autocast_is_finite_and_close_at_65536_tokens(dtype, large_activations):
    """Tolerance: merely storing ``x`` and the weights in ``dtype`` (and computing the rest
    exactly) already moves the output by a few percent in bf16 (~1% in fp16): the
    local softmax sees logits in the thousands and the p = 3 focusing cubes the
    features, so a relative input error of one unit roundoff is amplified. That error
    is unavoidable for any implementation. The operator's own low-precision arithmetic
    may add at most half of it again; an overflow, a lost normalisation or a
    precision-losing intermediate would add far more (or give inf/NaN).
    """
    m, x, hw_shape, full = large_activations
    with torch.no_grad():
        unavoidable = (rounded(m, dtype)(x.to(dtype).float(), hw_shape) - full).norm()
        with torch.autocast('cpu', dtype=dtype):
            low = m(x, hw_shape)
    assert low.dtype == dtype
    assert torch.isfinite(low).all()
    assert (low.float() - full).norm() <= 1.5 * unavoidable
    assert unavoidable <= 0.1 * full.norm()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_low_precision_autocast_gradients_are_finite_and_close(dtype):
    """Gradients of x and of every parameter under autocast, against float32.

    Bound: 1.5x the error of exact gradients at x and weights rounded to ``dtype``
    (as for the forward pass), plus 8 unit roundoffs for the operator's own
    arithmetic at ordinary activation sizes, where input rounding alone is tiny.
    """
    torch.manual_seed(0)
    hw_shape = (32, 32)
    m = randomise(LiSAAttention(32, 2, num_steps=3, pos_shape=(16, 16), num_prefix_tokens=1))
    x = torch.randn(2, 1 + math.prod(hw_shape), 32)

    def grads(module, x, autocast=False):
        x = x.clone().requires_grad_()
        module.zero_grad()
        with torch.autocast('cpu', dtype=dtype, enabled=autocast):
            out = module(x, hw_shape)
        out.float().square().mean().backward()
        return torch.cat([x.grad.flatten()] + [p.grad.flatten() for p in module.parameters()])

    full = grads(m, x)
    unavoidable = (grads(rounded(m, dtype), x.to(dtype).float()) - full).norm()
    low = grads(m, x, autocast=True)
    assert torch.isfinite(low).all()
    assert (low - full).norm() <= 1.5 * unavoidable + 8 * torch.finfo(dtype).eps * full.norm()


def test_build_attention_builds_lisa_by_name():
    m = build_attention(dict(type='lisa', num_steps=5, beta=0.7), dim=12, num_heads=3, num_prefix_tokens=1)
    assert isinstance(m, LiSAAttention)
    assert (m.num_steps, m.beta, m.num_prefix_tokens) == (5, 0.7, 1)
    assert sorted(n for n, _ in m.named_parameters()) == sorted([
        'qkv.weight', 'qkv.bias', 'proj.weight', 'proj.bias', 'scale', 'dwc.weight', 'dwc.bias',
        'step_mlp.0.weight', 'step_mlp.0.bias', 'step_mlp.2.weight', 'step_mlp.2.bias', 'alpha'])


@pytest.mark.parametrize('head_dim,step_mlp_hidden,hidden', [(64, None, 64), (32, None, 32), (3, None, 3), (32, 8, 8)])
def test_step_mlp_maps_q_and_k_through_a_head_width_hidden_layer_to_t_logits(head_dim, step_mlp_hidden, hidden):
    """Default width: the head dim (the width that gives Table 1's LiSA DeiT-T FLOPs); an option."""
    mlp = LiSAAttention(2 * head_dim, 2, num_steps=3, step_mlp_hidden=step_mlp_hidden).step_mlp
    assert [tuple(mlp[i].weight.shape) for i in (0, 2)] == [(hidden, 2 * head_dim), (3, hidden)]
    assert isinstance(mlp[1], nn.GELU)


def test_adaptive_weights_start_as_the_geometric_walk():
    hw_shape = (3, 4)
    adaptive = LiSAAttention(12, 3, num_steps=4, beta=0.6, step_weights='adaptive').double()
    geometric = LiSAAttention(12, 3, num_steps=4, beta=0.6, step_weights='geometric').double()
    geometric.load_state_dict(adaptive.state_dict(), strict=False)
    x = tokens(2, hw_shape)
    # rtol: the MLP bias log(c_k) was set in float32
    torch.testing.assert_close(adaptive(x, hw_shape), geometric(x, hw_shape), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('kwargs,message', [
    (dict(num_steps=0), 'num_steps=0'),
    (dict(num_steps=2.5), 'num_steps=2.5'),
    (dict(beta=1.0), 'beta=1.0'),
    (dict(beta=-0.1), 'beta=-0.1'),
    (dict(step_weights='learned'), "step_weights='learned'"),
    (dict(num_steps=math.inf), 'num_steps=inf'),
    (dict(beta=0.0), 'beta=0'),
    (dict(use_global=False, use_local=False), 'use_global and use_local'),
    (dict(local_kernel_size=4), 'local_kernel_size=4'),
    (dict(step_mlp_hidden=0), 'step_mlp_hidden=0'),
    (dict(feature_map='tanh'), "feature_map='tanh'"),
    (dict(focusing_factor=0.5), 'focusing_factor=0.5'),
    (dict(dwc_kernel_size=4), 'dwc_kernel_size=4'),
    (dict(pos_shape=(0, 3)), r'pos_shape must be two positive ints \(H, W\), got \(0, 3\)'),
    (dict(num_prefix_tokens=-1), 'num_prefix_tokens=-1'),
    (dict(eps=0.0), 'eps=0.0'),
    (dict(backend='fast'), r"backend='fast' is not one of \['auto', 'reference', 'torch', 'cpu_kernel'\]"),
    (dict(num_heads=5), 'num_heads=5 must be a positive divisor of dim=12'),
], ids=str)
def test_invalid_arguments_raise_naming_the_value(kwargs, message):
    kwargs = {'num_heads': 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        LiSAAttention(12, **kwargs)


def test_token_count_must_match_the_grid():
    m = LiSAAttention(12, 3, num_prefix_tokens=1)
    with pytest.raises(ValueError, match=r'N=12 tokens do not match hw_shape=\(3, 4\) with 1 prefix'):
        m(torch.randn(1, 12, 12), (3, 4))
    with pytest.raises(ValueError, match=r'expected tokens of shape \(B, N, C\), got \(12, 12\)'):
        m(torch.randn(12, 12), (3, 4))

