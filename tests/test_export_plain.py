"""Plain ``torch.export.export`` and ``torch.onnx.export(..., dynamo=True)`` of LiSA models, without
``set_backend(model, 'reference')``, checked against eager (fast path)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from test_export_onnx import OnGrid  # a LiSA layer on an image grid, parameters off their init
from torch import nn

from projects.lisa.models.attention import ops
from projects.lisa.models.attention.ops import solve_unpivoted
from projects.lisa.models.backbones import LiSAPVT

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures('seed_and_one_thread')


def small_pvt() -> nn.Module:
    """Two LiSA-PVT stages (stride-4 grid with one head, a second behind a patch embedding)."""
    return LiSAPVT(arch=dict(embed_dims=[8, 16], depths=[1, 1], num_heads=[1, 2], mlp_ratios=[2, 2]),
                   patch_sizes=(4, 2), out_indices=(0, 1), pretrain_img_size=64, drop_path_rate=0.0).eval()


def lisa_ops(program: torch.export.ExportedProgram) -> set[str]:
    """The ``lisa::`` ops anywhere in an exported program (submodules included)."""
    return {str(n.target) for g in program.graph_module.modules() if isinstance(g, torch.fx.GraphModule)
            for n in g.graph.nodes if 'lisa' in str(n.target)}


def onnx_outputs(model: nn.Module, x: torch.Tensor, at: list[torch.Tensor], **kwargs) -> list[list]:
    """Export with the plain call (no switch, no translation table), run by onnxruntime at ``at``."""
    ort = pytest.importorskip('onnxruntime')
    with torch.no_grad():
        program = torch.onnx.export(model, (x, ), dynamo=True, **kwargs)
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=['CPUExecutionProvider'])
    return [session.run(None, {session.get_inputs()[0].name: t.numpy()}) for t in at]


@pytest.mark.parametrize('kwargs', [{}, dict(step_weights='geometric', num_steps=4), dict(use_global=False)],
                         ids=['adaptive', 'geometric', 'local-only'])
def test_torch_export_of_a_lisa_layer_holds_no_custom_op_and_computes_as_eager(kwargs):
    """Eagerly the layer runs the ``lisa::`` ops; the exported program computes the same in plain
    tensor operations, at the traced size and (dynamic height and width) at another."""
    model = OnGrid(dict(type='lisa', **kwargs))
    x = torch.randn(1, 3, 5, 7)
    dynamic = {'x': {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}}
    program = torch.export.export(model, (x, ), dynamic_shapes=dynamic)
    assert lisa_ops(program) == set()
    for shape in [(5, 7), (8, 3)]:
        x = torch.randn(1, 3, *shape)
        with torch.no_grad():
            torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_export_leaves_the_fast_path_of_eager_and_compile_alone():
    """The kernels are refused only while exporting: eagerly (and under torch.compile, which is
    not an export) the same layer still reaches them."""
    if not ops.kernels_built():
        pytest.skip('the CPU kernels are not built')
    x = torch.randn(1, 3, 4)
    assert ops.can_run('cpu_kernel', x)
    seen = []

    class Probe(nn.Module):
        def forward(self, t):
            seen.append(ops.resolve('auto', t))
            return t + 1

    torch.export.export(Probe(), (x, ))
    torch.compile(Probe(), backend='eager', fullgraph=True)(x)
    assert seen[0] == 'reference' and seen[-1] == 'cpu_kernel'


def test_solve_unpivoted_solves_the_untruncated_walks_system():
    """The ONNX path of T = infinity equals ``torch.linalg.solve`` on the walk's ``I - beta K^T Q~``
    (a nonsingular M-matrix: ``K^T Q~ >= 0`` with spectral radius <= 1)."""
    a = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    a = a / a.sum(-2, keepdim=True)  # column-stochastic: spectral radius 1
    system = torch.eye(8, dtype=torch.float64) - 0.9 * a
    b = torch.randn(2, 3, 8, 5, dtype=torch.float64)
    torch.testing.assert_close(solve_unpivoted(system, b), torch.linalg.solve(system, b), rtol=1e-10, atol=1e-10)


def test_torch_export_of_a_lisa_pvt_backbone_computes_as_eager():
    model = small_pvt()
    x = torch.randn(1, 3, 64, 96)
    program = torch.export.export(model, (x, ))
    assert lisa_ops(program) == set()
    with torch.no_grad():
        for out, ref in zip(program.module()(x), model(x)):
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize('kwargs', [{}, dict(use_global=False),
                                    dict(num_steps=math.inf, step_weights='geometric')],
                         ids=['adaptive', 'local-only', 'T-inf'])
def test_plain_onnx_export_of_a_lisa_layer_runs_on_onnxruntime_as_eager(kwargs):
    """The export needs no ONNX function for the ``lisa::`` ops (``No ONNX function found for
    <OpOverload(op='lisa.kernel_features')>``) nor, for T = infinity, for ``aten.linalg_solve``.
    About 10 s each."""
    model = OnGrid(dict(type='lisa', **kwargs))
    x = torch.randn(1, 3, 5, 7)
    at = [x, torch.randn(1, 3, 8, 3)]
    outs = onnx_outputs(model, x, at, dynamic_shapes={'x': {2: torch.export.Dim.DYNAMIC,
                                                            3: torch.export.Dim.DYNAMIC}})
    for t, (out, ) in zip(at, outs):
        with torch.no_grad():
            torch.testing.assert_close(torch.from_numpy(out), model(t), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_plain_onnx_export_of_a_lisa_pvt_backbone_runs_on_onnxruntime_as_eager():
    model = small_pvt()
    x = torch.randn(1, 3, 64, 96)
    (outs, ) = onnx_outputs(model, x, [x])
    with torch.no_grad():
        for out, ref in zip(outs, model(x)):
            torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_plain_export_of_a_lisa_semantic_fpn_segmentor_computes_as_eager():
    """The Table 3 LiSA-PVT-T Semantic FPN (one block per stage): ``forward(x)`` (mmseg's
    ``mode='tensor'``, the decode head's logits) by torch.export and by ONNX on onnxruntime."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    cfg = Config.fromfile(ROOT / 'configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py')
    cfg.model.backbone.arch = dict(embed_dims=[64, 128, 320, 512], depths=[1, 1, 1, 1], num_heads=[1, 2, 5, 8],
                                   mlp_ratios=[8, 8, 4, 4])
    cfg.model.backbone.init_cfg = None
    cfg.model.data_preprocessor = None
    init_default_scope('mmseg')
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.eval()
    x = torch.randn(1, 3, 64, 96)
    with torch.no_grad():
        ref = model(x)
    program = torch.export.export(model, (x, ))
    assert lisa_ops(program) == set()
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), ref, rtol=1e-5, atol=1e-5)
    ((out, ), ) = onnx_outputs(model, x, [x])
    torch.testing.assert_close(torch.from_numpy(out), ref, rtol=1e-4, atol=1e-5)
