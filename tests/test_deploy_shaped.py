"""The export-shaped formulations (:mod:`projects.lisa.deploy.shaped`) compute what the references compute,
and the export traces them (issue #40)."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F
from test_export_onnx import OnGrid  # an attention on an image grid, parameters off their init

from projects.lisa import deploy
from projects.lisa.deploy import shaped
from projects.lisa.models.attention import layers
from projects.lisa.models.attention.ops import neighbourhood
from projects.lisa.models.attention.ops.neighbourhood import neighbourhood_attention_reference
from projects.lisa.models.backbones import base

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


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
@pytest.mark.parametrize('mode', ['bilinear', 'bicubic'])
@pytest.mark.parametrize('size_in, size_out', [((7, 5), (20, 9)), ((56, 56), (128, 136)), ((14, 14), (14, 14)),
                                               ((16, 9), (5, 3))])
def test_resize_by_interpolation_matrices_matches_f_interpolate(size_in, size_out, mode, dtype):
    grid = torch.randn(*size_in, 6, dtype=dtype)
    expected = F.interpolate(grid.permute(2, 0, 1)[None], size=size_out, mode=mode, align_corners=False)
    torch.testing.assert_close(shaped.resize_grid_matmul(grid, size_out, mode), expected[0].permute(1, 2, 0),
                               **TOLERANCES[dtype])


def test_export_formulations_swap_the_traced_functions_for_the_block_only():
    before = (neighbourhood.IMPLEMENTATIONS['reference'], layers.resize_grid, base.resize_grid)
    with shaped.export_formulations():
        assert neighbourhood.IMPLEMENTATIONS['reference'] is shaped.neighbourhood_attention_tiled
        assert layers.resize_grid is base.resize_grid is shaped.resize_grid_matmul
    assert (neighbourhood.IMPLEMENTATIONS['reference'], layers.resize_grid, base.resize_grid) == before
    with pytest.raises(RuntimeError), shaped.export_formulations():
        raise RuntimeError
    assert (neighbourhood.IMPLEMENTATIONS['reference'], layers.resize_grid, base.resize_grid) == before


def test_exported_lisa_layer_has_no_shifted_copies_or_resize_and_matches_eager_at_two_sizes(tmp_path):
    """About 10 s: the formulations as onnxruntime runs them, at the traced size and another."""
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxruntime')
    model = OnGrid(dict(type='lisa'))
    deploy.export(model, (6, 9), tmp_path / 'lisa.onnx', opset=18)
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / 'lisa.onnx')).graph.node)
    assert ops['Resize'] == 0 and ops['Slice'] < 20, ops
    errors = deploy.relative_errors(model, tmp_path / 'lisa.onnx', [(6, 9), (11, 5)])
    assert max(e for _, _, e in errors) < 1e-5, errors
