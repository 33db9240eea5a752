"""The local branch, fused CPU kernel and tensor-operation path, against dense masked attention."""
from __future__ import annotations

import math
import warnings

import attention_reference as ref
import pytest
import torch

from projects.lisa.models.attention import local
from projects.lisa.models.attention.local import neighbourhood_attention, neighbourhood_attention_reference

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


@pytest.fixture(params=['fused', 'tensor-ops', 'reference'])
def local_branch(request, monkeypatch):
    """The local branch with the fused CPU kernel, with the tensor-operation path, and the
    reference (plain autograd code)."""
    if request.param == 'tensor-ops':
        monkeypatch.setattr(local, 'CPU_KERNEL', None)
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', 'projects.lisa: the fused CPU kernel')
        yield neighbourhood_attention_reference if request.param == 'reference' else neighbourhood_attention


def test_fused_kernel_is_built_and_runs_on_the_cpu_only(monkeypatch):
    """`pip install -e .` (tools/install.sh) builds it; without it the CPU figures are not ours."""
    assert local.CPU_KERNEL is not None, 'build it with `pip install --no-build-isolation -e .`'
    assert (local.implementation('cpu'), local.implementation('cuda')) == (local.FUSED, local.TENSOR_OPS)
    monkeypatch.setattr(local, 'CPU_KERNEL', None)
    assert local.implementation('cpu') == local.TENSOR_OPS


def inputs(hw_shape, num_prefix_tokens, d, dv, dtype=torch.float64, batch=2, heads=3):
    n = num_prefix_tokens + math.prod(hw_shape)
    q, k = (4 * torch.rand(batch, heads, n, d, dtype=dtype) for _ in range(2))
    v = torch.randn(batch, heads, n, dv, dtype=dtype)
    w = torch.rand(1, heads, 1, 1, dtype=dtype)
    return q, k, v, w


# d, dv cover every lane path of the kernel: 4 float64 lanes, blocks of 8/4/2/1 vectors and
# a scalar tail (63 = 4 (8 + 4 + 2 + 1) + 3); kernel 1, 3, 5: one, one and three groups of 9 offsets.
@pytest.mark.parametrize('hw_shape,num_prefix_tokens,kernel_size,d,dv', [
    ((5, 7), 0, 3, 8, 8),
    ((6, 4), 1, 3, 63, 5),
    ((4, 6), 2, 5, 3, 64),
    ((1, 9), 1, 3, 4, 4),
    ((3, 3), 0, 1, 6, 7),
    ((9, 1), 0, 5, 16, 2),
])
def test_local_branch_matches_dense_masked_softmax(local_branch, hw_shape, num_prefix_tokens, kernel_size, d, dv):
    q, k, v, w = inputs(hw_shape, num_prefix_tokens, d, dv)
    out = local_branch(q, k, v, hw_shape, d ** -0.5, kernel_size, w, num_prefix_tokens)
    expected = w * ref.neighbourhood(q, k, v, hw_shape, num_prefix_tokens, kernel_size)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize('hw_shape,num_prefix_tokens,kernel_size,d,dv', [
    ((4, 5), 1, 3, 9, 6),
    ((3, 4), 0, 5, 4, 11),
])
def test_local_branch_gradients_match_finite_differences(local_branch, hw_shape, num_prefix_tokens,
                                                          kernel_size, d, dv):
    args = [t.requires_grad_() for t in inputs(hw_shape, num_prefix_tokens, d, dv, batch=1, heads=2)]

    def f(q, k, v, w):
        return local_branch(q, k, v, hw_shape, 0.7, kernel_size, w, num_prefix_tokens)

    assert torch.autograd.gradcheck(f, args)


def test_fused_kernel_equals_the_tensor_operations_in_float32(monkeypatch):
    hw_shape = (17, 23)
    q, k, v, w = (t.float().requires_grad_() for t in inputs(hw_shape, 1, 64, 64))
    g = torch.randn_like(v)

    def run():
        for t in (q, k, v, w):
            t.grad = None
        neighbourhood_attention(q, k, v, hw_shape, 0.125, 3, w, 1).backward(g)
        return [t.grad for t in (q, k, v, w)]

    fused = run()
    monkeypatch.setattr(local, 'CPU_KERNEL', None)
    with pytest.warns(UserWarning, match='fused CPU kernel of the local branch is not built'):
        unfused = run()
    for a, b in zip(fused, unfused):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fused_kernel_result_does_not_depend_on_the_thread_count():
    hw_shape = (13, 11)
    q, k, v, w = (t.float().requires_grad_() for t in inputs(hw_shape, 1, 32, 32))
    g = torch.randn_like(v)
    results = []
    for threads in (1, 3):
        torch.set_num_threads(threads)
        for t in (q, k, v, w):
            t.grad = None
        out = neighbourhood_attention(q, k, v, hw_shape, 0.125, 3, w, 1)
        out.backward(g)
        results.append([out.detach()] + [t.grad for t in (q, k, v, w)])
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.filterwarnings('ignore:projects.lisa. the fused CPU kernel')
@pytest.mark.parametrize('path', ['fused', 'tensor-ops', 'tensor-ops in row blocks'])
@pytest.mark.parametrize('hw_shape,num_prefix_tokens,kernel_size', [((5, 3), 1, 3), ((4, 6), 0, 5)])
def test_fast_paths_match_the_reference_forward_and_gradients(path, hw_shape, num_prefix_tokens, kernel_size,
                                                              monkeypatch):
    """The fused kernel and the tensor operations (one block, or blocks of two 3-wide rows of
    d = 4) against the reference's autograd, float64."""
    if path != 'fused':
        monkeypatch.setattr(local, 'CPU_KERNEL', None)
    if path == 'tensor-ops in row blocks':
        monkeypatch.setattr(local, 'CPU_BLOCK_ELEMENTS', 24)
    args = [t.requires_grad_() for t in inputs(hw_shape, num_prefix_tokens, 4, 4)]
    fast = neighbourhood_attention(*args[:3], hw_shape, 0.7, kernel_size, args[3], num_prefix_tokens)
    reference = neighbourhood_attention_reference(*args[:3], hw_shape, 0.7, kernel_size, args[3], num_prefix_tokens)
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, args, g), torch.autograd.grad(reference, args, g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings('ignore:projects.lisa. the fused CPU kernel')
@pytest.mark.parametrize('op', ['neighbourhood_fused', 'neighbourhood'])
def test_custom_ops_pass_opcheck(op):
    """Schema, fake implementation (shapes, strides, dtypes of every output), autograd
    registration and dynamic-shape tracing of the registered ops."""
    q, k, v, w = inputs((4, 3), 1, 5, 6, batch=1, heads=2)
    args = (*(t.flatten(0, 1).requires_grad_() for t in (q, k, v)), w.flatten().requires_grad_())
    torch.library.opcheck(getattr(torch.ops.lisa, op), (*args, 4, 3, 1, 0.5, 3))
