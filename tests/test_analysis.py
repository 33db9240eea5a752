"""FLOP counting, efficiency measurement and attention-map extraction (projects/lisa/analysis, tools)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from mmengine.analysis import FlopAnalyzer
from mmengine.config import Config
from torch import nn

from projects.lisa.analysis.walk_maps import attention_matrices, query_token, split_row
from projects.lisa.benchmarks.flops import Complexity, config_complexity, flop_analyzer, model_complexity
from projects.lisa.benchmarks.timing import cuda_peak_bytes, loglog_plot, median_seconds, saved_tensor_bytes
from projects.lisa.models.attention import build_attention
from projects.lisa.models.attention.layers import merge_heads
from projects.lisa.models.attention.ops import geometric_weights, neighbourhood_attention, random_walk
from projects.lisa.models.attention.ops.walk import _walk_forward
from tools import benchmark_model, get_flops

ROOT = Path(__file__).resolve().parents[1]


class Call(nn.Module):
    """A module around a function, so the FLOP analyzer can trace it."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class OnGrid(nn.Module):
    """An attention layer called on a fixed grid."""

    def __init__(self, attn: nn.Module, hw_shape) -> None:
        super().__init__()
        self.attn, self.hw_shape = attn, hw_shape

    def forward(self, x):
        return self.attn(x, self.hw_shape)


def nonneg(*shape: int) -> torch.Tensor:
    return torch.rand(*shape) + 0.05


# --- FLOPs -----------------------------------------------------------------------------------


def test_softmax_attention_counts_its_two_products_like_explicit_matmuls():
    q, k, v = torch.randn(2, 3, 10, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 5)
    sdpa = flop_analyzer(Call(F.scaled_dot_product_attention), (q, k, v)).total()
    # MMEngine's own matmul handles on the explicit computation: the reference.
    explicit = FlopAnalyzer(Call(lambda q, k, v: (q @ k.transpose(-2, -1)).softmax(-1) @ v), (q, k, v))
    assert sdpa == explicit.unsupported_ops_warnings(False).total() == 2 * 3 * 10 * 7 * (4 + 5)


@pytest.mark.parametrize('per_token', [False, True])
@pytest.mark.parametrize('steps', [2, 3, 5])
def test_walk_is_counted_as_every_product_its_forward_performs(steps, per_token):
    b, h, n, d, dv = 2, 3, 11, 4, 6
    q, k, v = nonneg(b, h, n, d), nonneg(b, h, n, d), torch.randn(b, h, n, dv)
    weights = torch.rand(b, h, n, steps) if per_token else geometric_weights(0.5, steps).float()
    handled = flop_analyzer(Call(lambda q, k, v, w: random_walk(q, k, v, w, 1e-6)), (q, k, v, weights))
    # The forward traced inline (not as one custom-op node), in tensor operations (the fused
    # kernels' passes are opaque to the trace): every matmul it runs, its output and what it
    # keeps for backward (so that the trace keeps them all).
    def forward_inline(q, k, v, w):
        out, saved = _walk_forward(q, k, v, w, 1e-6, kernels=False)
        return (out, *saved)

    w4 = weights.reshape((1,) * (4 - weights.dim()) + weights.shape)
    inline = FlopAnalyzer(Call(forward_inline), (q, k, v, w4)).unsupported_ops_warnings(False)
    assert handled.total() == inline.total() > 0
    read_out = n * d * dv * (steps - 1 if per_token else 1)
    hand = b * h * (n * d + n * d * d + n * d * dv + (steps - 2) * d * d * dv + read_out)
    assert handled.total() == hand


@pytest.mark.parametrize('prefix', [0, 1])
def test_local_branch_is_counted_as_products_over_the_clipped_windows(prefix):
    b, h, (gh, gw), d, dv = 2, 3, (3, 4), 5, 7
    n = prefix + gh * gw
    q, k, v = torch.randn(b, h, n, d), torch.randn(b, h, n, d), torch.randn(b, h, n, dv)
    local = Call(lambda q, k, v: neighbourhood_attention(q, k, v, (gh, gw), 0.5, num_prefix_tokens=prefix))
    pairs = sum(1 for y in range(gh) for x in range(gw) for y2 in range(gh) for x2 in range(gw)
                if abs(y - y2) <= 1 and abs(x - x2) <= 1)
    assert flop_analyzer(local, (q, k, v)).total() == b * h * pairs * (d + dv)


@pytest.mark.parametrize('backend', ['cpu_kernel', 'torch'])
def test_every_custom_op_of_the_operator_has_a_handle(backend):
    attn = build_attention(dict(type='lisa', backend=backend), 16, 2, pos_shape=(3, 3), num_prefix_tokens=1)
    result = model_complexity(OnGrid(attn, (3, 3)), (torch.randn(1, 10, 16),))
    assert not [op for op in result.uncounted if op.startswith('lisa::') or op.startswith('prim::PythonOp')]
    assert {'random_walk', 'neighbourhood_attention', 'linear', 'conv'} <= set(result.by_operator)


@pytest.mark.parametrize('cfg', [dict(type='flatten'), dict(type='linear', dwc=True), dict(type='lisa')])
def test_cpu_kernel_ops_count_as_the_code_they_replace(cfg):
    """The CPU kernels' depthwise conv, kernel features and walk passes count as the code they replace."""
    counts = []
    for backend in ('cpu_kernel', 'torch'):
        attn = build_attention(dict(cfg, backend=backend), 16, 2, pos_shape=(3, 3), num_prefix_tokens=1)
        result = model_complexity(OnGrid(attn, (3, 3)), (torch.randn(1, 10, 16),))
        counts.append((result.flops, dict(result.by_operator)))
    assert counts[0] == counts[1] and counts[0][1]['conv'] > 0


@torch.library.custom_op('lisa::test_unhandled', mutates_args=())
def _unhandled(x: torch.Tensor) -> torch.Tensor:
    return x @ x


@_unhandled.register_fake
def _(x):
    return torch.empty_like(x)


def test_an_operator_custom_op_without_handle_is_refused():
    with pytest.raises(RuntimeError, match='lisa::test_unhandled'):
        model_complexity(Call(_unhandled), (torch.randn(3, 3),))


MM_PVT_T_FPN = dict(
    _base_=['mmseg::_base_/models/fpn_r50.py'],
    custom_imports=dict(imports=['mmdet.models'], allow_failed_imports=False),
    model=dict(pretrained=None, backbone=dict(_delete_=True, type='mmdet.PyramidVisionTransformer',
                                              num_layers=[2, 2, 2, 2]),
               neck=dict(in_channels=[64, 128, 320, 512]), decode_head=dict(num_classes=150)))


@pytest.mark.slow
def test_our_softmax_pvt_fpn_counts_like_mmdets_pvt_t(tmp_path):
    """Parameter and FLOP parity of our softmax PVT-T Semantic FPN with mmdet's PVT-T,
    whose 158G at 2048x512 is the paper's figure."""
    reference = tmp_path / 'fpn_mmdet-pvt-t.py'
    Config(MM_PVT_T_FPN).dump(str(reference))
    ref_cfg = Config.fromfile(str(reference))
    ref_cfg.default_scope = 'mmseg'
    ours = config_complexity(ROOT / 'configs/segmentation/fpn_pvt-t_8xb4-40k_ade20k-512x512.py', (64, 96))
    mm = config_complexity(ref_cfg, (64, 96))
    assert (ours.params, ours.flops) == (mm.params, mm.flops)
    assert ours.input_hw == (64, 96) and ours.by_operator['scaled_dot_product_attention'] > 0


def test_get_flops_sets_the_measured_figure_beside_the_papers():
    from tools.get_flops import row
    result = Complexity(flops=int(159.58e9), params=int(16.98e6), input_hw=(512, 2048))
    assert row(ROOT / 'configs/segmentation/fpn_pvt-t_8xb4-40k_ade20k-512x512.py', result) == (
        '| `segmentation/fpn_pvt-t_8xb4-40k_ade20k-512x512.py` | 2048x512 | 16.98 | 159.6 | 158 | +1.0% |')
    no_paper = row(ROOT / 'configs/detection/mask-rcnn_flatten-pvt-t_fpn_1x_coco.py', result)
    assert no_paper.endswith('| 159.6 | - | - |')


def test_get_flops_markdown_reads_the_paper_rows_from_the_counted_figures(tmp_path):
    from tools.get_flops import paper_reading, write_markdown
    gflops = {  # made-up counts, so every difference below is derived by hand
        'segmentation/fpn_pvt-t_8xb4-40k_ade20k-512x512.py': 158.0,
        'segmentation/fpn_flatten-pvt-t_8xb4-40k_ade20k-512x512.py': 130.0,
        'segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py': 133.5,
        'segmentation/upernet_swin-t_8xb2-160k_ade20k-512x512.py': 945.0,
        'segmentation/upernet_flatten-swin-t_8xb2-160k_ade20k-512x512.py': 944.0,
        'segmentation/upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py': 946.0,
        'detection/mask-rcnn_pvt-t_fpn_1x_coco.py': 240.0,
        'detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py': 215.0,
    }
    results = {k: Complexity(flops=int(v * 1e9), params=1) for k, v in gflops.items()}
    text = '\n'.join(paper_reading(results))
    assert '+3.5G here, +1G in the paper (PVT-T Semantic FPN)' in text      # 133.5 - 130; 170 - 169
    assert '+2.0G here, +1G in the paper (Swin-T UperNet)' in text          # 946 - 944; 947 - 946
    assert 'FLatten - Swin: -1.0G here, +1G in the paper' in text
    assert 'LiSA-PVT-T 215.0G here, below PVT-T\'s 240.0G, against 245G' in text
    del results['detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py']
    assert paper_reading(results) == []  # a partial count is not read against the paper
    out = tmp_path / 'docs' / 'flops.md'
    write_markdown(out, ['--paper'], ['| a |', '|---|'], ['para one'])
    assert out.read_text().splitlines()[2].startswith('Written by `python tools/get_flops.py --paper`')
    assert '| a |\n|---|\n\npara one\n' in out.read_text()


@pytest.mark.slow
def test_get_flops_counts_the_walk_of_a_config(capsys):
    from tools.get_flops import main
    main([str(ROOT / 'configs/classification/deit-tiny_lisa_8xb128_in1k.py'), '--shape', '32', '32',
          '--by-operator'])
    out = capsys.readouterr().out
    assert 'at 32x32' in out and 'random_walk' in out and 'neighbourhood_attention' in out


# --- Efficiency ------------------------------------------------------------------------------


def test_saved_bytes_count_each_storage_once_and_skip_excluded_tensors():
    x = torch.randn(6, 5, requires_grad=True)
    w = nn.Parameter(torch.randn(5, 5))

    def forward():
        h = (x @ w).exp()              # saves x and w (excluded) and exp's output
        return (h[:3] * h[3:]).sum()   # saves two views of exp's output: the same storage

    assert saved_tensor_bytes(forward, exclude=[x, w]) == 6 * 5 * 4
    assert x.grad is not None and w.grad is not None  # the backward ran


def test_timed_steps_take_turns_after_the_warmup_and_stop_at_their_budget():
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in ('a', 'b')}
    medians = median_seconds(steps, torch.device('cpu'), warmup=1, repeats=2)
    assert calls == ['a', 'b'] * 3 and set(medians) == {'a', 'b'}
    calls.clear()
    median_seconds(steps, torch.device('cpu'), warmup=0, repeats=9, budget_s=0.0)
    assert calls == ['a', 'b']  # one timed call each exhausts a zero budget


def test_timed_steps_read_the_given_clock():
    ticks = iter([0.0, 2.0, 10.0, 15.0, 20.0, 24.0, 30.0, 31.0])
    medians = median_seconds({'a': lambda: None, 'b': lambda: None}, torch.device('cpu'), warmup=0, repeats=2,
                             clock=lambda: next(ticks))
    assert medians == {'a': 3.0, 'b': 3.0}  # a: 2 and 4, b: 5 and 1


def test_cuda_peak_needs_a_cuda_device():
    with pytest.raises(ValueError, match='CUDA'):
        cuda_peak_bytes(lambda: None, torch.device('cpu'))


def test_benchmark_model_writes_table_json_and_plot(tmp_path):
    from tools.benchmark_model import main
    main(['--img-sizes', '32', '--warmup', '1', '--repeats', '1', '--threads', '1', '--out', str(tmp_path)])
    rows = json.loads((tmp_path / 'benchmark_model.json').read_text())['rows']
    assert [(r['attention'], r['tokens']) for r in rows] == [('softmax', 5), ('flatten', 5), ('lisa', 5)]
    assert all(r['saved'] > 0 and r['train_ms'] > 0 and r['fwd_ms'] > 0 for r in rows)
    assert '| flatten | 32² | 5 |' in (tmp_path / 'benchmark_model.md').read_text()
    assert (tmp_path / 'benchmark_model.png').stat().st_size > 0


# --- Attention maps --------------------------------------------------------------------------


def lisa_layer(step_weights: str = 'adaptive', prefix: int = 1, hw=(3, 4), **kwargs):
    torch.manual_seed(0)
    attn = build_attention(dict(type='lisa', step_weights=step_weights, **kwargs), 12, 2, pos_shape=hw,
                           num_prefix_tokens=prefix).double()
    with torch.no_grad():  # leave the initialisation: per-token weights and alpha away from 1/2
        for p in attn.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, prefix + hw[0] * hw[1], 12, dtype=torch.float64)
    return attn, x, hw


@pytest.mark.parametrize('step_weights', ['adaptive', 'geometric'])
def test_drawn_maps_are_the_rows_of_the_module_output(step_weights):
    attn, x, hw = lisa_layer(step_weights)
    maps = attention_matrices(attn, x, hw)
    q, k, v = attn.features(x, hw)
    with torch.no_grad():
        torch.testing.assert_close(maps['global'] @ v, attn.global_branch(q, k, v))
        torch.testing.assert_close(maps['local'] @ v, attn.local_branch(q, k, v, hw))
        torch.testing.assert_close(maps['fused'] @ v, attn.mix(q, k, v, hw))
        # The whole layer: Y = proj((P V + DWC(V)) merged over heads).
        out = attn.proj(merge_heads(maps['fused'] @ v + attn.depthwise(v, hw)))
        torch.testing.assert_close(out, attn(x, hw))


def test_walk_maps_equal_explicit_transition_powers():
    attn, x, hw = lisa_layer('geometric', prefix=0, eps=1e-12)
    maps = attention_matrices(attn, x, hw, powers=(0, 1, 3), steps=(1, 3))
    q, k, _ = attn.features(x, hw)
    s = q @ k.transpose(-2, -1)
    s = s / s.sum(-1, keepdim=True)  # S_ij = q_i.k_j / sum_l q_i.k_l, dense
    eye = torch.eye(s.shape[-1], dtype=s.dtype)
    torch.testing.assert_close(maps['S^0'], eye.expand_as(s))
    torch.testing.assert_close(maps['S^1'], s)
    torch.testing.assert_close(maps['S^3'], s @ s @ s)
    torch.testing.assert_close(maps['P^(1)'], eye.expand_as(s))
    c = geometric_weights(attn.beta, 3).to(s.dtype)
    torch.testing.assert_close(maps['P^(3)'], c[0] * eye + c[1] * s + c[2] * s @ s)
    torch.testing.assert_close(maps['P^(3)'].sum(-1), torch.ones(s.shape[:-1], dtype=s.dtype))


def test_local_map_of_a_corner_token_covers_its_clipped_window():
    attn, x, hw = lisa_layer(prefix=1, hw=(3, 4))
    local = attention_matrices(attn, x, hw, powers=(), steps=())['local']
    corner = 1  # the class token comes first, then grid row 0
    prefix, grid = split_row(local[0, 0, corner], hw, 1)
    assert prefix.item() == 0 and torch.count_nonzero(grid) == 4 and grid[:2, :2].all()
    torch.testing.assert_close(grid.sum(), torch.tensor(1.0, dtype=grid.dtype))


def test_query_pixel_maps_to_its_grid_token():
    assert query_token((0, 0), (224, 224), (14, 14), 1) == 1
    assert query_token((223, 17), (224, 224), (14, 14), 1) == 1 + 1 * 14 + 13
    assert query_token((50, 30), (64, 128), (4, 8), 0) == 1 * 8 + 3
    with pytest.raises(ValueError, match='outside'):
        query_token((224, 0), (224, 224), (14, 14))


def test_maps_refuse_softmax_attention_and_oversized_grids(monkeypatch):
    softmax = build_attention(dict(type='softmax'), 12, 2)
    with pytest.raises(TypeError, match='kernel attention'):
        attention_matrices(softmax, torch.randn(1, 4, 12), (2, 2))
    attn, x, hw = lisa_layer(prefix=0)
    monkeypatch.setattr('projects.lisa.analysis.walk_maps.MAX_TOKENS', 8)
    with pytest.raises(ValueError, match='MAX_TOKENS'):
        attention_matrices(attn, x, hw)


def test_visualize_walk_draws_a_figure(tmp_path):
    from tools.visualize_walk import main
    out = tmp_path / 'walk.png'
    main([str(ROOT / 'configs/classification/deit-tiny_lisa_8xb128_in1k.py'), '--input-size', '48', '48',
          '--layer', 'layers.1.attn', '--query', '5', '40', '--out', str(out)])
    assert out.stat().st_size > 0


def test_loglog_plot_draws_one_colour_per_group_and_skips_missing_series(tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    drawn = {}

    def record(fig, path, **kwargs):
        drawn.update({line.get_label(): (list(line.get_xdata()), list(line.get_ydata()), line.get_color())
                      for ax in fig.axes for line in ax.get_lines()})
        Path(path).write_bytes(b'png')

    monkeypatch.setattr(Figure, 'savefig', record)
    rows = [{'m': 'a', 'n': 10, 't': 2.0, 's': 2 ** 20}, {'m': 'a', 'n': 1, 't': 1.0, 's': 2 ** 21},
            {'m': 'b', 'n': 1, 't': 3.0, 's': 2 ** 22, 'p': 2 ** 23}]
    loglog_plot(rows, 'm', 'n', {'t': 'time'}, {'s': 'saved', 'p': 'peak'}, tmp_path / 'x.png', 'title')
    assert set(drawn) == {'a time', 'a saved', 'b time', 'b saved', 'b peak'}
    assert drawn['a time'][:2] == ([1, 10], [1.0, 2.0])  # sorted by x
    assert drawn['a saved'][1] == [2.0, 1.0]  # MiB
    assert drawn['a time'][2] == drawn['a saved'][2] != drawn['b time'][2] == drawn['b peak'][2]


@pytest.mark.parametrize('tool,argv,message', [
    (benchmark_model, ['--threads', '0'], '--threads=0 must be >= 1'),
    (benchmark_model, ['--repeats', '0'], '--repeats=0 must be >= 1'),
    (benchmark_model, ['--img-sizes', '100'], '--img-sizes: 100 is not a positive multiple'),
    (get_flops, ['--paper', '--threads', '0'], '--threads=0 must be >= 1'),
], ids=['benchmark_model-threads', 'benchmark_model-repeats', 'benchmark_model-img-sizes', 'get_flops-threads'])
def test_tools_refuse_invalid_options_naming_the_value(tool, argv, message, capsys):
    parse_args = tool.parse_args
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err
