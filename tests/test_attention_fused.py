"""The kernel attentions' operators (``projects.lisa.models.attention.ops``: depthwise conv, kernel features,
the walk's row argmax) in every backend against plain tensor code, the custom ops' registration, and the
backend choice itself (per module, global, refused names and backends)."""
from __future__ import annotations

import ast
import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from backends import BACKENDS, FAST, require
from torch import nn

from projects.lisa.models.attention import build_attention, ops, set_backend
from projects.lisa.models.attention.layers import split_heads
from projects.lisa.models.attention.ops import backend as ops_backend
from projects.lisa.models.attention.ops import depthwise, features, focus, neighbourhood, walk

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')
needs_kernels = pytest.mark.skipif(not ops.kernels_built(), reason='the CPU kernels are not built')


def conv_reference(x, weight, bias, hw_shape, p):
    """``nn.Conv2d(d, d, k, padding=k // 2, groups=d)`` on the grid of ``x (BH, p + H*W, d)``, prefix rows zero."""
    bh, n, d = x.shape
    grid = x[:, p:].reshape(bh, *hw_shape, d).permute(0, 3, 1, 2)
    out = F.conv2d(grid, weight, bias, padding=weight.shape[-1] // 2, groups=d).permute(0, 2, 3, 1)
    return F.pad(out.reshape(bh, n - p, d), (0, 0, p, 0))


@pytest.mark.parametrize('bh,hw_shape,d,p,k', [
    (3, (7, 5), 6, 2, 5), (2, (9, 11), 32, 0, 3), (1, (4, 4), 17, 1, 5), (2, (2, 3), 8, 0, 7), (1, (1, 1), 3, 0, 3)],
    ids=str)
@pytest.mark.parametrize('backend', BACKENDS)
def test_depthwise_conv_matches_conv2d_in_value_and_gradients(bh, hw_shape, d, p, k, backend):
    x = torch.randn(bh, p + math.prod(hw_shape), d, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(d, 1, k, k, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(d, dtype=torch.float64, requires_grad=True)
    g = torch.randn(x.shape, dtype=torch.float64)
    got = ops.depthwise_conv(x, weight, bias, hw_shape, p, backend=require(backend, x))
    want = conv_reference(x, weight, bias, hw_shape, p)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got, (x, weight, bias), g), torch.autograd.grad(want, (x, weight, bias), g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@needs_kernels
def test_depthwise_conv_custom_op_passes_opcheck():
    """Schema, fake implementation, autograd registration and dynamic-shape tracing of ``lisa::depthwise_conv``."""
    x = torch.randn(2, 1 + 12, 5, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(5, 1, 3, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.lisa.depthwise_conv, (x, weight, bias, 3, 4, 1))


@needs_kernels
def test_depthwise_conv_backward_custom_op_passes_opcheck():
    """The backward op too: its weight gradient is the contiguous tensor the fake promises; a transposed
    view stops inductor on the stride mismatch (whole Swin, dynamic=True)."""
    x = torch.randn(2, 1 + 12, 5, dtype=torch.float64)
    weight = torch.randn(5, 1, 3, 3, dtype=torch.float64)
    torch.library.opcheck(torch.ops.lisa.depthwise_conv_backward, (torch.randn_like(x), x, weight, 3, 4, 1))


@needs_kernels
@pytest.mark.parametrize('with_pos', [True, False])
def test_kernel_features_custom_op_passes_opcheck(with_pos):
    """Schema, fake implementation, autograd registration and dynamic-shape tracing of ``lisa::kernel_features``."""
    qkv = torch.randn(2, 7, 3 * 6, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(1, 7, 6, dtype=torch.float64, requires_grad=True) if with_pos else None
    s = torch.rand(6, dtype=torch.float64, requires_grad=True) + 0.5
    torch.library.opcheck(torch.ops.lisa.kernel_features, (qkv, pos, s, 2, 3.0))


@pytest.mark.parametrize('backend', BACKENDS)
@pytest.mark.parametrize('p', [3.0, 2.0, 1.5])
def test_kernel_features_match_the_focusing_function_in_value_and_gradients(p, backend):
    b, n, heads, d = 2, 9, 3, 4
    qkv = torch.randn(b, n, 3 * heads * d, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(1, n, heads * d, dtype=torch.float64, requires_grad=True)
    s = torch.rand(heads * d, dtype=torch.float64, requires_grad=True) + 0.5
    q, k, v = qkv.chunk(3, dim=-1)
    q, k = focus((F.relu(q) + 1e-6) / s, p), focus((F.relu(k + pos) + 1e-6) / s, p)
    want = [split_heads(t, heads) for t in (q, k, v)]
    got = ops.kernel_features(qkv, pos, s, heads, p, backend=require(backend, qkv))
    gs = [torch.randn(t.shape, dtype=torch.float64) for t in want]
    for a, b_ in zip(got, want):
        assert a.is_contiguous() or backend != 'cpu_kernel'
        torch.testing.assert_close(a, b_, rtol=1e-12, atol=1e-12)
    for a, b_ in zip(torch.autograd.grad(got, (qkv, pos, s), gs), torch.autograd.grad(want, (qkv, pos, s), gs)):
        torch.testing.assert_close(a, b_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('cfg', [
    dict(type='flatten'), dict(type='linear', dwc=True, dwc_kernel_size=3), dict(type='lisa'),
    dict(type='lisa', feature_map='elu', focusing=False)], ids=str)
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize('num_prefix_tokens', [0, 1])
@pytest.mark.parametrize('backend', FAST)
def test_fast_backends_match_the_reference_in_value_and_gradients(cfg, dtype, num_prefix_tokens, backend):
    hw_shape = (6, 5)
    fast = build_attention(dict(cfg, backend=require(backend, torch.empty(0, dtype=dtype))), 24, 3, pos_shape=(4, 4),
                           num_prefix_tokens=num_prefix_tokens).to(dtype)
    with torch.no_grad():
        for name, p in fast.named_parameters():
            if name in ('scale', 'alpha', 'positional_encoding.weight', 'step_mlp.2.weight'):
                p.normal_(0, 0.5)
    reference = set_backend(copy.deepcopy(fast), 'reference')
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


def test_set_backend_switches_every_kernel_attention():
    model = nn.ModuleList([build_attention(dict(type=t), 12, 3) for t in ('linear', 'flatten', 'lisa')])
    set_backend(model, 'reference')
    assert [m.backend for m in model] == ['reference'] * 3
    set_backend(model, None)
    assert [m.backend for m in model] == [None] * 3


def test_use_backend_is_the_global_choice_a_module_or_call_naming_its_own_overrides():
    x = torch.empty(2, dtype=torch.float64)
    assert ops.current_backend() == 'auto'
    with ops.use_backend('reference'):
        assert ops.current_backend() == 'reference'
        assert ops.resolve(None, x) == 'reference'
        assert ops.resolve('torch', x) == 'torch'
        with ops.use_backend('torch'):
            assert ops.resolve(None, x) == 'torch'
        assert ops.resolve(None, x) == 'reference'
    assert ops.current_backend() == 'auto'
    with pytest.raises(ValueError, match=r"backend='fast' is not one of \['auto', 'reference', 'torch', "
                                         r"'cpu_kernel'\]"):
        with ops.use_backend('fast'):
            pass
    assert ops.current_backend() == 'auto'


@pytest.mark.parametrize('cfg', [dict(type='flatten'), dict(type='lisa')], ids=str)
def test_a_model_under_use_backend_computes_as_with_that_backend_set_on_every_module(cfg):
    """The global choice reaches every operator of a module that names none: under ``use_backend('reference')``
    the output equals the reference module's exactly, which the CPU kernels' does not (in the last bits)."""
    m = build_attention(cfg, 24, 3, pos_shape=(4, 4)).double()
    with torch.no_grad():
        m.scale.normal_(0, 0.5)
    x = torch.randn(2, 30, 24, dtype=torch.float64)
    with torch.no_grad(), ops.use_backend('reference'):
        global_reference = m(x, (6, 5))
    with torch.no_grad():
        reference = set_backend(copy.deepcopy(m), 'reference')(x, (6, 5))
    assert torch.equal(global_reference, reference)
    if ops.kernels_built():
        with torch.no_grad():
            assert not torch.equal(set_backend(m, 'cpu_kernel')(x, (6, 5)), reference)


@pytest.mark.parametrize('operator', [walk, neighbourhood, features, depthwise], ids=lambda m: m.__name__)
def test_every_operator_has_one_table_holding_every_backend(operator):
    assert tuple(operator.IMPLEMENTATIONS) == ops.BACKENDS
    assert all(callable(f) for f in operator.IMPLEMENTATIONS.values())


def test_the_operators_import_nothing_from_the_modules_above_them():
    """``ops/`` stands alone: no relative import reaches out of it (``from ..layers import ...``)."""
    for path in Path(ops.__file__).parent.glob('*.py'):
        reaching_out = [n.module for n in ast.walk(ast.parse(path.read_text()))
                        if isinstance(n, ast.ImportFrom) and n.level > 1]
        assert not reaching_out, f'{path.name} imports {reaching_out}'


@pytest.mark.parametrize('backend', BACKENDS)
def test_a_lisa_layer_asks_once_per_operator_call_which_backend_runs_it(backend, monkeypatch):
    """Forward and backward of a LiSA layer check the backend 4 times, once per operator call (features,
    walk, local branch, depthwise conv): nothing inside an operator, its backward or the module asks again."""
    m = build_attention(dict(type='lisa', backend=require(backend, torch.empty(0))), 24, 3, pos_shape=(4, 4))
    x = torch.randn(2, 30, 24, requires_grad=True)
    checks = []
    obstacle = ops_backend._obstacle
    monkeypatch.setattr(ops_backend, '_obstacle', lambda *args: checks.append(args[0]) or obstacle(*args))
    m(x, (6, 5)).sum().backward()
    assert checks == [backend] * 4


def test_a_backend_named_explicitly_that_cannot_run_raises_naming_the_reason():
    meta = torch.empty(2, 3, device='meta')
    assert ops.can_run('torch', meta) and ops.can_run('reference', meta) and not ops.can_run('cpu_kernel', meta)
    with pytest.raises(ValueError, match=r"backend='cpu_kernel' cannot run here: the CPU kernels take CPU "
                                         r'float32/float64 tensors, got torch.float32 on meta'):
        ops.resolve('cpu_kernel', meta)
    with pytest.raises(ValueError, match="backend='cpu_kernel' cannot run here: the CPU kernels do not run under CPU "
                                         'autocast'), torch.autocast('cpu', dtype=torch.bfloat16):
        ops.resolve('cpu_kernel', torch.empty(2))


@pytest.mark.parametrize('kernels', [True, False])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize('length', [1, 3, 8, 64, 100, 4096])
def test_row_argmax_is_the_first_index_of_each_row_maximum(dtype, length, kernels):
    x = torch.randn(2, 3, 5, length, dtype=dtype)
    x[0, 0, 0] = 1.0                                     # all equal: index 0
    x[0, 0, 1, length // 2:] = x[0, 0, 1].max() + 1      # ties: the first of them
    x[1, 2, 4, -1] = x[1, 2, 4].max() + 1                # the last entry
    got = walk.PASSES[kernels].row_argmax(x)
    assert got.shape == (2, 3, 5, 1) and got.dtype == torch.long
    assert torch.equal(got, x.argmax(-1, keepdim=True))
    assert got[0, 0, 1].item() == length // 2 and got[1, 2, 4].item() == length - 1
