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
    assert md_flatten.split(' | ')[-4:] == ['1.00x'] * 3 + ['1.00x |']
    (md_lisa, ) = [line for line in doc.splitlines() if line.startswith('| lisa | 17 |')]
    lisa, flatten = rows[1], rows[0]
    assert md_lisa.split(' | ')[8] == f"{lisa['fwd_bwd_ms'] / flatten['fwd_bwd_ms']:.2f}x"


@pytest.mark.parametrize('argv,message', [(['--threads', '0'], '--threads=0 must be >= 1'),
                                          (['--repeats', '0'], '--repeats=0 must be >= 1'),
                                          (['--warmup', '-1'], '--warmup=-1 must be >= 0'),
                                          (['--sizes', '7'], 'N=7 is neither')])
def test_invalid_options_are_refused_naming_the_value(argv, message, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert message in capsys.readouterr().err
