"""The local branch in every backend (CPU kernel, tensor-operation custom op, reference) against dense
masked attention."""
from __future__ import annotations

import functools
import math

import attention_reference as ref
import pytest
import torch
from backends import BACKENDS, FAST, require

from projects.lisa.models.attention import ops
from projects.lisa.models.attention.ops import neighbourhood
from projects.lisa.models.attention.ops.neighbourhood import neighbourhood_attention, neighbourhood_attention_reference

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


@pytest.fixture(params=BACKENDS)
def local_branch(request):
    """The local branch by each backend: :func:`neighbourhood_attention` with ``backend`` named."""
    require(request.param, torch.empty(0))
    return functools.partial(neighbourhood_attention, backend=request.param)


def test_cpu_kernels_are_built_and_auto_picks_them_for_cpu_float_tensors_only():
    """`pip install -e .` (tools/install.sh) builds them; without them the CPU figures are not ours."""
    assert ops.kernels_built(), 'build them with `pip install --no-build-isolation -e .`'
    cpu, meta = torch.empty(2, dtype=torch.float64, device='cpu'), torch.empty(2, device='meta')
    assert [ops.resolve('auto', t) for t in (cpu, cpu.float(), cpu.bfloat16(), meta)] == [
        'cpu_kernel', 'cpu_kernel', 'torch', 'torch']
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert ops.resolve('auto', cpu) == 'torch'


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


def test_cpu_kernel_equals_the_tensor_operations_in_float32():
    hw_shape = (17, 23)
    q, k, v, w = (t.float().requires_grad_() for t in inputs(hw_shape, 1, 64, 64))
    g = torch.randn_like(v)

    def run(backend):
        for t in (q, k, v, w):
            t.grad = None
        neighbourhood_attention(q, k, v, hw_shape, 0.125, 3, w, 1, backend=require(backend, q)).backward(g)
        return [t.grad for t in (q, k, v, w)]

    for a, b in zip(run('cpu_kernel'), run('torch')):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('backend', FAST)
def test_custom_ops_result_does_not_depend_on_the_thread_count(backend):
    hw_shape = (13, 11)
    q, k, v, w = (t.float().requires_grad_() for t in inputs(hw_shape, 1, 32, 32))
    require(backend, q)
    g = torch.randn_like(v)
    results = []
    for threads in (1, 3):
        torch.set_num_threads(threads)
        for t in (q, k, v, w):
            t.grad = None
        out = neighbourhood_attention(q, k, v, hw_shape, 0.125, 3, w, 1, backend=backend)
        out.backward(g)
        results.append([out.detach()] + [t.grad for t in (q, k, v, w)])
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize('path', ['cpu_kernel', 'torch', 'torch in row blocks'])
@pytest.mark.parametrize('hw_shape,num_prefix_tokens,kernel_size', [((5, 3), 1, 3), ((4, 6), 0, 5)])
def test_fast_backends_match_the_reference_forward_and_gradients(path, hw_shape, num_prefix_tokens, kernel_size,
                                                                 monkeypatch):
    """The CPU kernel and the tensor operations (one block, or blocks of two 3-wide rows of
    d = 4) against the reference's autograd, float64."""
    if path == 'torch in row blocks':
        monkeypatch.setattr(neighbourhood, 'CPU_BLOCK_ELEMENTS', 24)
    args = [t.requires_grad_() for t in inputs(hw_shape, num_prefix_tokens, 4, 4)]
    backend = require(path.split()[0], *args)
    fast = neighbourhood_attention(*args[:3], hw_shape, 0.7, kernel_size, args[3], num_prefix_tokens, backend=backend)
    reference = neighbourhood_attention_reference(*args[:3], hw_shape, 0.7, kernel_size, args[3], num_prefix_tokens)
    torch.testing.assert_close(fast, reference, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, args, g), torch.autograd.grad(reference, args, g)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('op', ['neighbourhood_fused', 'neighbourhood'])
def test_custom_ops_pass_opcheck(op):
    """Schema, fake implementation (shapes, strides, dtypes of every output), autograd
    registration and dynamic-shape tracing of the registered ops."""
    q, k, v, w = inputs((4, 3), 1, 5, 6, batch=1, heads=2)
    args = (*(t.flatten(0, 1).requires_grad_() for t in (q, k, v)), w.flatten().requires_grad_())
    torch.library.opcheck(getattr(torch.ops.lisa, op), (*args, 4, 3, 1, 0.5, 3))
