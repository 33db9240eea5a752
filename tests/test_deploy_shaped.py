"""The export-shaped formulations (:mod:`projects.lisa.deploy.shaped`) compute what the references compute,
and the export traces them."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_export_onnx import OnGrid  # an attention on an image grid, parameters off their init

from projects.lisa import deploy
from projects.lisa.deploy import rewrites, shaped
from projects.lisa.models.attention import layers, linear
from projects.lisa.models.attention.ops import features, neighbourhood, walk
from projects.lisa.models.attention.ops.features import kernel_features_reference
from projects.lisa.models.attention.ops.neighbourhood import neighbourhood_attention_reference
from projects.lisa.models.attention.ops.walk import random_walk_reference
from projects.lisa.models.backbones import grid

pytestmark = pytest.mark.usefixtures('seed_and_one_thread')
TOLERANCES = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5)}


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('hw, prefix, kernel_size, tile', [
    ((5, 7), 0, 3, 4),    # neither side a multiple of the tile
    ((8, 12), 1, 3, 4),   # both multiples, a class token
    ((9, 6), 2, 5, 4),    # a 5 x 5 window
    ((1, 1), 0, 3, 4),    # one token: its window is itself
    ((11, 10), 0, 3, 8),
])
def test_tiled_neighbourhood_attention_matches_the_reference(hw, prefix, kernel_size, tile, dtype):
    q, k, v = (torch.randn(2, 3, prefix + hw[0] * hw[1], 8, dtype=dtype) for _ in range(3))
    out_scale = torch.rand(1, 3, 1, 1, dtype=dtype)
    for w in (None, out_scale):
        got = shaped.neighbourhood_attention_tiled(q, k, v, hw, 0.4, kernel_size, w, prefix, tile=tile)
        torch.testing.assert_close(got, neighbourhood_attention_reference(q, k, v, hw, 0.4, kernel_size, w, prefix),
                                   **TOLERANCES[dtype])


def test_tiled_neighbourhood_attention_matches_the_reference_on_far_spread_logits():
    """Logits hundreds apart within a window: weights below e^-80 of the largest are raised to it, no
    rounding sees that; none overflows or turns into NaN."""
    q, k, v = (torch.randn(1, 2, 9 * 11, 8, dtype=torch.float64) * 20 for _ in range(3))
    got = shaped.neighbourhood_attention_tiled(q, k, v, (9, 11), 1.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, neighbourhood_attention_reference(q, k, v, (9, 11), 1.0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('n', [50, 197])
@pytest.mark.parametrize('weights_shape', [(2, 3, None, 3), (3,), (1, 3, 1, 4), (2, 3, None, 1), (1, 3, 1, 2)],
                         ids=['per-token', 'fixed', 'per-head', 'self-loop', 'per-head-T2'])
def test_shaped_walk_matches_the_reference(weights_shape, n, dtype):
    q, k, v = (torch.rand(2, 3, n, 8, dtype=dtype) for _ in range(3))
    q[0, 0, 3] = 0   # an all-zero feature row (ReLU features) and an all-zero K
    k[1, 2] = 0
    weights = torch.rand(*(n if s is None else s for s in weights_shape), dtype=dtype).softmax(-1)
    got = shaped.random_walk_shaped(q, k, v, weights, 1e-6)
    torch.testing.assert_close(got, random_walk_reference(q, k, v, weights, 1e-6), **TOLERANCES[dtype])


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('n, with_pos', [(50, True), (197, False)])
def test_shaped_kernel_features_match_the_reference(n, with_pos, dtype):
    """Half the entries ReLU-zeroed and large ones beside them: ``u^3`` of the zeroed ones squares to
    subnormals in float32, which the shaped focusing keeps out of its norm without changing a value."""
    qkv = torch.randn(2, n, 3 * 16, dtype=dtype) * 30
    pos = torch.randn(1, n, 16, dtype=dtype) if with_pos else None
    s = torch.rand(16, dtype=dtype) + 0.3
    for got, expected in zip(shaped.kernel_features_shaped(qkv, pos, s, 2, 3.0),
                             kernel_features_reference(qkv, pos, s, 2, 3.0)):
        torch.testing.assert_close(got, expected, **TOLERANCES[dtype])


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('n', [50, 197])
def test_shaped_linear_attention_matches_flattens(n, dtype):
    q, k, v = (torch.rand(2, 3, n, 8, dtype=dtype) for _ in range(3))
    torch.testing.assert_close(shaped.linear_attention_shaped(q, k, v, 1e-6), linear.linear_attention(q, k, v, 1e-6),
                               **TOLERANCES[dtype])


def test_linears_on_rows_compute_as_the_layers():
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 4, bias=False))
    x = torch.randn(2, 7, 6)
    expected = model(x)
    rewrites.gemm_linears(model)
    torch.testing.assert_close(model(x), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model(x[0, 0]), expected[0, 0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('size_in, size_out', [((7, 5), (20, 9)), ((56, 56), (128, 136)), ((14, 14), (14, 14)),
                                               ((16, 9), (5, 3)), ((7, 7), (1, 2))])
def test_resize_by_interpolation_matrices_matches_f_interpolate(size_in, size_out, mode, dtype):
    """Equal to ``F.interpolate`` in float64; in float32 to eager's matrices (read off ``F.interpolate`` in
    float64), and to ``F.interpolate`` within its own float32 coordinate rounding."""
    grid_in = torch.randn(*size_in, 6, dtype=dtype)
    expected = F.interpolate(grid_in.permute(2, 0, 1)[None], size=size_out, mode=mode, align_corners=False)
    got = shaped.resize_grid_matmul(grid_in, size_out, mode)
    loose = TOLERANCES[dtype] if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got, expected[0].permute(1, 2, 0), **loose)
    torch.testing.assert_close(got, layers.resize_grid(grid_in, size_out, mode), **TOLERANCES[dtype])


class ResizedTable(torch.nn.Module):
    """A (7, 9, 4) table resized to the input's grid of 4 x 4 patches."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.table, self.mode = torch.nn.Parameter(torch.randn(7, 9, 4)), mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layers.resize_grid(self.table, (x.shape[2] // 4, x.shape[3] // 4), self.mode)


@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
def test_exported_resize_follows_the_input_size(mode, tmp_path):
    """Exported at one size, the graph's interpolation matrices follow the (symbolic) size: up, down and
    to one row, as eager's."""
    ort = pytest.importorskip('onnxruntime')
    module = ResizedTable(mode)
    dims = {2: torch.export.Dim.DYNAMIC, 3: torch.export.Dim.DYNAMIC}
    with torch.no_grad(), shaped.export_formulations():
        program = torch.onnx.export(module, (torch.randn(1, 1, 32, 48), ), dynamo=True, dynamic_shapes=(dims, ))
    program.save(tmp_path / 'resize.onnx')
    session = ort.InferenceSession(str(tmp_path / 'resize.onnx'))
    assert 'Resize' not in {node.op_type for node in program.model_proto.graph.node}
    for hw in ((32, 48), (64, 20), (4, 100), (16, 16)):
        x = torch.randn(1, 1, *hw)
        with torch.no_grad():
            expected = module(x).numpy()
        np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0], expected,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('approximate', ['none', 'tanh'])
def test_fusable_gelu_is_nn_gelu(approximate):
    x = torch.randn(300, 7, dtype=torch.float64) * 4
    module = torch.nn.GELU(approximate)
    torch.testing.assert_close(shaped.gelu_fusable(module, x), module(x), rtol=1e-12, atol=1e-12)


def test_exported_gelu_is_fused_by_onnxruntime(tmp_path):
    """Traced under the formulations, an MLP's GELU is one ``Gelu`` kernel once onnxruntime has loaded the file
    (which holds standard ops only), and equals eager."""
    ort = pytest.importorskip('onnxruntime')
    onnx = pytest.importorskip('onnx')
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(50, 8)
    with torch.no_grad(), shaped.export_formulations():
        torch.onnx.export(mlp, (x, ), dynamo=True).save(tmp_path / 'mlp.onnx')
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / 'loaded.onnx')
    session = ort.InferenceSession(str(tmp_path / 'mlp.onnx'), options, providers=['CPUExecutionProvider'])
    domains = {node.domain for node in onnx.load(str(tmp_path / 'mlp.onnx')).graph.node}
    assert domains <= {'', 'ai.onnx'}, domains
    assert 'Gelu' in [node.op_type for node in onnx.load(str(tmp_path / 'loaded.onnx')).graph.node]
    with torch.no_grad():
        expected = mlp(x).numpy()
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0], expected,
                               rtol=1e-5, atol=1e-6)


def test_export_formulations_swap_the_traced_functions_for_the_block_only():
    def traced():
        return (neighbourhood.IMPLEMENTATIONS['reference'], walk.IMPLEMENTATIONS['reference'],
                features.IMPLEMENTATIONS['reference'], layers.resize_grid, grid.resize_grid, linear.linear_attention,
                torch.nn.GELU.forward)

    before = traced()
    with shaped.export_formulations():
        assert traced() == (shaped.neighbourhood_attention_tiled, shaped.random_walk_shaped,
                            shaped.kernel_features_shaped, shaped.resize_grid_matmul, shaped.resize_grid_matmul,
                            shaped.linear_attention_shaped, shaped.gelu_fusable)
    assert traced() == before
    with pytest.raises(RuntimeError), shaped.export_formulations():
        raise RuntimeError
    assert traced() == before


@pytest.mark.parametrize('cfg', [dict(type='lisa'), dict(type='flatten')], ids=['lisa', 'flatten'])
def test_exported_layer_has_no_shifted_copies_or_resize_and_matches_eager_at_two_sizes(cfg, tmp_path):
    """About 10 s each: the formulations as onnxruntime runs them, at the traced size and another."""
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    model = OnGrid(cfg)
    deploy.export(model, (6, 9), tmp_path / 'layer.onnx', opset=18)
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / 'layer.onnx')).graph.node)
    assert ops['Resize'] == 0 and ops['ReduceMean'] == 0 and ops['Slice'] < 20, ops
    errors = deploy.relative_errors(model, tmp_path / 'layer.onnx', [(6, 9), (11, 5)])
    assert max(e for _, _, e in errors) < 1e-5, errors
