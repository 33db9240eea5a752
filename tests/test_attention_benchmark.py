"""The attention-layer benchmark (projects.lisa.benchmarks.attention) and its command line,
tools/benchmark_attention.py."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from projects.lisa.benchmarks import attention as bench
from tools import benchmark_attention as tool


@pytest.mark.parametrize('n,expected', [(197, ((14, 14), 1)), (1024, ((32, 32), 0)), (16385, ((128, 128), 1)),
                                        (65536, ((256, 256), 0))])
def test_grid_of_token_count_with_optional_class_token(n, expected):
    assert bench.grid_of(n) == expected


def test_grid_of_rejects_a_count_that_is_no_grid():
    with pytest.raises(ValueError, match='N=7 is neither a square number nor 1 \\+ a square number'):
        bench.grid_of(7)


class Twice(nn.Module):
    """Saves its (non-parameter) activation several times, through views as well."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4, 5))

    def forward(self, x, hw_shape):
        h = (x * self.weight).exp()  # mul saves x and weight (not counted); exp saves h
        flat = h.view(-1)
        return h * h + (flat[:5] * flat[5:10]).sum()  # h twice more, then two views of it


def test_saved_bytes_counts_each_storage_once_without_parameters_and_input():
    x = torch.randn(4, 5, requires_grad=True)
    assert bench.saved_bytes(Twice(), x, None) == 4 * 5 * 4


def test_build_gives_each_method_its_grid_and_class_token():
    m = bench.build('lisa', 197, 192, 3)
    assert (m.num_prefix_tokens, m.positional_encoding.pos_shape, m.num_steps) == (1, (14, 14), 3)
    assert m.use_local and m.step_weights == 'adaptive' and m.dwc is not None and m.scale is not None
    assert bench.build('softmax', 1024, 192, 3).num_prefix_tokens == 0


@pytest.mark.slow
def test_benchmark_writes_table_json_and_plot_with_ratios_to_flatten(tmp_path):
    tool.main(['--sizes', '17', '--methods', 'flatten', 'lisa', '--repeats', '1', '--warmup', '0',
                '--out', str(tmp_path), '--markdown', str(tmp_path / 'docs' / 'operator.md')])
    rows = json.loads((tmp_path / 'attention_benchmark.json').read_text())['rows']
    assert [(r['method'], r['N'], r['grid']) for r in rows] == [('flatten', 17, '4x4'), ('lisa', 17, '4x4')]
    assert all(r['fwd_ms'] > 0 and r['fwd_bwd_ms'] > 0 and r['saved'] > 0 and r['peak'] > 0 for r in rows)
    table = (tmp_path / 'attention_benchmark.txt').read_text()
    (flatten, ) = [line for line in table.splitlines() if line.startswith('flatten ') and '|' in line]
    assert flatten.split('|')[1].split() == ['1.00'] * 4
    assert (tmp_path / 'attention_benchmark.png').stat().st_size > 0
    doc = (tmp_path / 'docs' / 'operator.md').read_text()
    assert 'Written by `python tools/benchmark_attention.py --sizes 17 --methods flatten lisa' in doc
    (md_flatten, ) = [line for line in doc.splitlines() if line.startswith('| flatten | 17 |')]
    assert md_flatten.split(' | ')[7:11] == ['1.00x'] * 4 and md_flatten.split(' | ')[-3:] == ['1.000x', '1.000',
                                                                                               '1.000 |']
    (md_lisa, ) = [line for line in doc.splitlines() if line.startswith('| lisa | 17 |')]
    lisa, flatten = rows[1], rows[0]
    assert md_lisa.split(' | ')[8] == f"{lisa['fwd_bwd_ms'] / flatten['fwd_bwd_ms']:.2f}x"
    flops = lisa['flops'] / flatten['flops']
    assert md_lisa.split(' | ')[-3:] == [f'{flops:.3f}x', f"{lisa['fwd_ms'] / flatten['fwd_ms'] / flops:.3f}",
                                         f"{lisa['fwd_bwd_ms'] / flatten['fwd_bwd_ms'] / flops:.3f} |"]


def test_flops_of_flatten_are_its_products_counted_by_hand():
    """N = 65 (class token + 8x8), C = 192, 3 heads of 64: qkv and output projections N C (3C + C); K^T V
    and Q (K^T V) 2 N h d^2; the 5x5 depthwise conv on the 64 grid tokens, per head, 25 h d each."""
    n, c, h, d = 65, 192, 3, 64
    assert bench.count_flops('flatten', n, c, h) == n * c * 4 * c + 2 * n * h * d * d + (n - 1) * h * d * 25


def test_markdown_has_one_section_per_thread_count():
    rows = [{'method': m, 'N': 17, 'grid': '4x4', 'threads': t, 'fwd_ms': 1.0 * t, 'fwd_bwd_ms': 2.0, 'saved': 2**20,
             'peak': 2**20} for t in (1, 2) for m in ('flatten', 'lisa')]
    doc = bench.markdown(rows, 'setting', 'cmd')
    assert doc.index('## 1 thread\n') < doc.index('## 2 threads\n') and doc.count('| lisa | 17 | 4x4 |') == 2


@pytest.mark.parametrize('argv,message', [(['--threads', '0'], '--threads=0 must be >= 1'),
                                          (['--repeats', '0'], '--repeats=0 must be >= 1'),
                                          (['--warmup', '-1'], '--warmup=-1 must be >= 0'),
                                          (['--sizes', '7'], 'N=7 is neither')])
def test_invalid_options_are_refused_naming_the_value(argv, message, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert message in capsys.readouterr().err
