"""torch.compile, torch.jit and torch.export of the attentions and the dense backbones.

Every custom piece of LiSA is a registered custom op (``lisa::*``) with a fake
implementation and its autograd, so Dynamo traces a layer into one graph
(``fullgraph=True``) and inductor compiles it for new input sizes. Inductor
compiles take tens of seconds on the CPU: those tests are marked slow.
"""
from __future__ import annotations

import copy
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from projects.lisa.models.attention import ATTENTIONS, KernelAttention, build_attention, inductor_workaround, ops
from projects.lisa.models.backbones import LiSAPVT, LiSASwinTransformer

DIM, HEADS, POS_SHAPE = 16, 2, (4, 4)
#: Every attention type and LiSA's variants (T = inf, local only, global only).
ATTENTION_CFGS = {
    'softmax': dict(type='softmax'),
    'linear': dict(type='linear'),
    'linear-dwc': dict(type='linear', dwc=True),
    'flatten': dict(type='flatten'),
    'lisa': dict(type='lisa'),
    'lisa-geometric': dict(type='lisa', step_weights='geometric'),
    'lisa-inf': dict(type='lisa', num_steps=math.inf, step_weights='geometric'),
    'lisa-local-only': dict(type='lisa', use_global=False),
    'lisa-global-only': dict(type='lisa', use_local=False),
}


def attention(cfg: dict, num_prefix_tokens: int = 1) -> nn.Module:
    kwargs = dict(pos_shape=POS_SHAPE) if issubclass(ATTENTIONS[cfg['type']], KernelAttention) else {}
    m = build_attention(cfg, DIM, HEADS, num_prefix_tokens=num_prefix_tokens, **kwargs)
    with torch.no_grad():  # zero-initialised parameters random, so that every path counts
        for name, p in m.named_parameters():
            if name in ('scale', 'alpha', 'positional_encoding.weight', 'step_mlp.2.weight'):
                p.normal_(0, 0.5)
    return m


class Stack(nn.Module):
    """Layers applied in turn with residuals on one grid: one graph for many attentions."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, hw_shape: tuple[int, int]) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x, hw_shape)
        return x


def outputs_and_gradients(model: nn.Module, *inputs: torch.Tensor, **kwargs) -> list[torch.Tensor]:
    """The outputs (flattened) and the gradients of the first input and every parameter for a
    fixed random upstream gradient."""
    x = inputs[0].clone().requires_grad_()
    out = model(x, *inputs[1:], **kwargs)
    out = torch.cat([o.flatten() for o in out]) if isinstance(out, (tuple, list)) else out.flatten()
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    params = [p for p in model.parameters() if p.requires_grad]
    return [out.detach(), *torch.autograd.grad(out, [x, *params], g, allow_unused=True, materialize_grads=True)]


def assert_compiled_matches_eager(model: nn.Module, inputs: list[tuple], rtol=1e-4, atol=1e-5, **compile_kwargs):
    """``torch.compile(model, fullgraph=True, ...)`` on each input (a new size each): outputs and
    gradients equal to eager ones.

    ``atol`` is relative to each tensor's largest entry: float32 rounding of a sum grows with its
    summands, not with its result, and through a stack of layers the gradients reach tens (there
    an entry near zero differs by 2.4e-5 while eager and compiled are both 1e-5 to 1e-4 from a
    float64 run). A wrong graph differs by the tensor's own scale.
    """
    inductor_workaround.install()  # what every caller of torch.compile does on torch 2.14 (pytorch/pytorch#185510)
    compiled = torch.compile(copy.deepcopy(model), fullgraph=True, **compile_kwargs)
    for args in inputs:
        eager = outputs_and_gradients(model, *args)
        got = outputs_and_gradients(compiled, *args)
        for a, b in zip(got, eager):
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol * max(1.0, b.abs().max().item()))


def tokens(hw_shape, batch=2, num_prefix_tokens=1):
    return torch.randn(batch, num_prefix_tokens + math.prod(hw_shape), DIM)


class OnGrid(nn.Module):
    """An attention on the 5 x 3 grid of ``tokens((5, 3))``: a module of one input, to trace or export."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, (5, 3))


pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


@pytest.mark.parametrize('name', ['lisa', 'lisa-local-only'])
def test_lisa_layer_traces_into_one_graph_calling_its_custom_ops(name):
    """Dynamo's graph (no break, ``fullgraph=True``) holds the walk and the local branch as the
    registered ops, and AOT autograd traces their fake implementations and backward."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    torch._dynamo.reset()
    m = attention(ATTENTION_CFGS[name])
    assert_compiled_matches_eager(m, [(tokens((5, 3)), (5, 3))], backend=backend, dynamic=False)
    called = {str(n.target) for g in graphs for n in g.graph.nodes if 'lisa' in str(n.target)}
    kernels = {'lisa.kernel_features', 'lisa.depthwise_conv'} if ops.kernels_built() else set()
    assert called == ({'lisa.neighbourhood_fused', *kernels} if name == 'lisa-local-only'
                      else {'lisa.neighbourhood_fused', 'lisa.random_walk', *kernels})


@pytest.mark.filterwarnings('ignore:`torch.jit')
def test_traced_lisa_layer_saves_loads_and_computes_as_eager():
    """``torch.jit.trace`` records the custom ops by name, so the traced layer can be saved."""
    m = attention(ATTENTION_CFGS['lisa']).eval()
    x = tokens((5, 3))
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(OnGrid(m), (x,)), buffer)
        buffer.seek(0)
        # float32 tolerance, not bitwise: under tracing the positional encoding is resized by
        # F.interpolate, in eager by the cached interpolation matrices (equal to rounding, test_positional_resize)
        torch.testing.assert_close(torch.jit.load(buffer)(x), m(x, (5, 3)))


@pytest.mark.parametrize('name', ['lisa', 'lisa-local-only'])
def test_exported_lisa_layer_computes_as_eager(name):
    """Under ``torch.export`` the layer traces its reference math in place of the custom ops
    (tests/test_export_plain.py): the exported program computes the layer."""
    m = attention(ATTENTION_CFGS[name]).eval()
    x = tokens((5, 3))
    program = torch.export.export(OnGrid(m), (x,))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), m(x, (5, 3)), rtol=1e-6, atol=1e-6)


def test_importing_the_attentions_leaves_inductor_as_it_is():
    """Importing the package patches nothing: the workaround is installed by whoever compiles (a fresh
    interpreter, since this one may have compiled already)."""
    code = ('import projects.lisa.models.attention, projects.lisa.models.attention.inductor_workaround; '
            'from torch._inductor import ir; '
            "assert not getattr(ir.get_fill_order, '_lisa_shape_env_fallback', False), 'patched on import'")
    subprocess.run([sys.executable, '-W', 'ignore', '-c', code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_inductor_orders_symbolic_strides_of_a_lowering_by_its_shape_env():
    """The workaround of pytorch/pytorch#185510: strides that plain SymPy cannot order
    (``8 * (s // 4)**2`` against 1, the heads of a stride-4 patch grid) are ordered in an
    inductor lowering by its ShapeEnv, as their concrete values are."""
    from types import SimpleNamespace

    from torch._dynamo.source import ConstantSource
    from torch._inductor import ir
    from torch._inductor.virtualized import V
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._sympy.functions import FloorDiv

    assert inductor_workaround.install() and inductor_workaround.install()  # installing again keeps one wrapper
    assert ir.get_fill_order.__wrapped__.__name__ == 'get_fill_order'
    shape_env = ShapeEnv()
    s = shape_env.create_symbol(64, ConstantSource('s'))
    n = FloorDiv(s, 4) ** 2
    strides = [8 * n, 1, 8, 1]
    with V.set_graph_handler(SimpleNamespace(sizevars=SimpleNamespace(shape_env=shape_env))):
        assert ir.get_stride_order(strides) == ir.get_stride_order([8 * 16 ** 2, 1, 8, 1])


#: One attention per code path that inductor lowers: softmax, the one-hop kernels (linear with and
#: without the depthwise conv, FLatten's focusing), LiSA's walk with adaptive weights and its local
#: kernel, the closed-form T = inf walk. The other LiSA variants only drop or reweight these terms.
INDUCTOR_CFGS = ['softmax', 'linear', 'linear-dwc', 'flatten', 'lisa', 'lisa-inf']


@pytest.mark.slow
def test_every_attention_traces_for_two_input_sizes():
    """Dynamo and AOT autograd (``aot_eager``: no code generation) on every attention and LiSA
    variant in torch.compile's default mode: a static graph, then the automatic-dynamic recompile
    for the new size, both tracing the ops' fake implementations; outputs and backward equal
    eager's. Only this test traces the variants that the inductor test leaves out."""
    torch._dynamo.reset()
    model = Stack([attention(cfg) for cfg in ATTENTION_CFGS.values()])
    assert_compiled_matches_eager(model, [(tokens((4, 4)), (4, 4)), (tokens((6, 5)), (6, 5))], backend='aot_eager')


@pytest.mark.slow
def test_attentions_compile_with_inductor_for_two_input_sizes():
    """Inductor's code generation for each lowered code path (:data:`INDUCTOR_CFGS`), built once
    with symbolic shapes and run at two sizes; only this test compiles an attention's C++. It covers
    FLatten's depthwise conv, on which torch 2.14's inductor stops if the saved input is a permuted
    view (``cannot determine truth value of Relational``)."""
    torch._dynamo.reset()
    model = Stack([attention(ATTENTION_CFGS[name]) for name in INDUCTOR_CFGS])
    assert_compiled_matches_eager(model, [(tokens((4, 4)), (4, 4)), (tokens((6, 5)), (6, 5))], dynamic=True)


#: The smallest backbones that reach the code a layer test does not: the stride-4 patch grid with
#: one head (stage 1), a second stage behind a patch embedding or merging, Swin's shifted windows.
#: No stochastic depth (compiled and eager code draw different random numbers).
BACKBONES = {
    'LiSAPVT': lambda: LiSAPVT(arch=dict(embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 2], mlp_ratios=[2, 2]),
                               patch_sizes=(4, 2), out_indices=(0, 1), pretrain_img_size=64, drop_path_rate=0.0),
    'LiSASwinTransformer': lambda: LiSASwinTransformer(
        arch=dict(embed_dims=8, depths=[1, 2], num_heads=[1, 2]), out_indices=(0, 1), pretrain_img_size=64,
        drop_path_rate=0.0, attn_cfgs=[dict(type='lisa'), dict(type='window', window_size=4)]),
}


@pytest.mark.slow
@pytest.mark.parametrize('name, dynamic', [('LiSAPVT', True), ('LiSASwinTransformer', False)])
def test_backbones_compile_with_inductor(name, dynamic):
    """Inductor on a whole backbone, forward and backward, at one image size: only this test lowers
    the saved ``(B, 1, N, d)`` heads of a stride-4 stage (PVT, with symbolic shapes) and Swin's shifted
    windows behind patch merging (static shapes). Without
    :mod:`~projects.lisa.models.attention.inductor_workaround` inductor (torch 2.14.1) raises 'cannot
    determine truth value of Relational: 128*((s53//4)) < 1' in PVT's build, with ``dynamic=True`` as
    with the default recompile for a new size; new sizes under symbolic shapes are the attention test's.
    The image is not square, so that height and width are two symbols. Cost, cold inductor cache on a
    2-core machine: one size takes PVT 370 s, Swin 215 s wall beside a suite run (4 processes on 2 cores);
    each second size is a second full build (PVT: 93 s + 192 s of compile; Swin specialises a side:
    'size mismatch at index 3' under TORCH_LOGS=recompiles), 1,110 s (Swin, dynamic) and 430 s (PVT) for
    two sizes in a suite run."""
    torch._dynamo.reset()
    images = [(torch.randn(2, 3, 64, 96),)]
    # float32 through the stages and their backward: inductor's fused reductions sum in another order
    # (seen: 1.6e-5 absolute on a parameter gradient), so a whole backbone gets 10x the layer tolerance
    assert_compiled_matches_eager(BACKBONES[name]().train(), images, rtol=1e-3, atol=1e-4, dynamic=dynamic)
