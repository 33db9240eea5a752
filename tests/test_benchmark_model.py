"""The dense models' benchmark (projects.lisa.benchmarks.model): the Table 3 backbones (+ FPN neck)
timed side by side, and its command line, tools/benchmark_model.py --dense."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from projects.lisa.benchmarks import model as bench
from projects.lisa.benchmarks.timing import median_times
from tools import benchmark_model

ROOT = Path(__file__).resolve().parents[1]


def test_median_times_reads_every_clock_around_the_same_calls():
    wall = iter([0.0, 2.0, 10.0, 11.0, 20.0, 24.0, 30.0, 33.0])
    cpu = iter([0.0, 4.0, 10.0, 12.0, 20.0, 28.0, 30.0, 36.0])
    steps = {'a': lambda: None, 'b': lambda: None}
    times = median_times(steps, torch.device('cpu'), warmup=0, repeats=2,
                         clocks={'wall': lambda: next(wall), 'cpu': lambda: next(cpu)})
    # rounds: a, b, a, b -> wall a: 2, 4; b: 1, 3; cpu a: 4, 8; b: 2, 6
    assert times == {'a': {'wall': 3.0, 'cpu': 6.0}, 'b': {'wall': 2.0, 'cpu': 4.0}}


def row(family: str, model: str, train: tuple[float, float], infer: tuple[float, float]) -> dict:
    return {'family': family, 'measured': 'm', 'model': model, 'train_cpu_ms': train[0], 'train_wall_ms': train[1],
            'infer_cpu_ms': infer[0], 'infer_wall_ms': infer[1]}


def test_dense_table_gives_ratios_to_softmax_and_flatten_of_the_same_family():
    rows = [row('pvt', 'PVT-T', (100, 200), (50, 50)), row('pvt', 'FLatten-PVT-T', (120, 200), (40, 100)),
            row('pvt', 'LiSA-PVT-T', (126, 210), (45, 40)), row('swin', 'Swin-T', (10, 10), (10, 10)),
            row('swin', 'FLatten-Swin-T', (20, 10), (10, 10)), row('swin', 'LiSA-Swin-T', (11, 10), (10, 10))]
    table = bench.dense_table(rows, (512, 512), (512, 2048))
    lines = {line.split(' | ')[0][2:]: line.split(' | ') for line in table.split('\n')}
    assert lines['LiSA-PVT-T'][2:] == ['126 / 210', '45 / 40', '1.26x / 1.05x', '1.05x / 1.05x', '0.90x / 0.80x',
                                       '1.12x / 0.40x |']
    assert lines['LiSA-Swin-T'][4:6] == ['1.10x / 1.00x', '0.55x / 1.00x']
    assert 'train step 512×512 ms (CPU / wall)' in lines['model'][2] and '512×2048' in lines['model'][3]


def test_dense_table_of_several_processes_gives_the_median_and_range_of_their_ratios():
    runs = [[row('pvt', 'PVT-T', (100, 100), (10, 10)), row('pvt', 'FLatten-PVT-T', (100, 100), (10, 10)),
             row('pvt', 'LiSA-PVT-T', (lisa, 100), (10, 10))] for lisa in (104, 110, 101)]
    runs[1][1]['train_cpu_ms'] = 200  # FLatten slow in the second process: LiSA / FLatten 0.55 there
    rows = bench.merge_processes(runs)
    assert [r['train_cpu_ms'] for r in rows] == [100, 100, 104] and len(rows[2]['processes']) == 3
    table = bench.dense_table(rows, (512, 512), (512, 2048))
    lines = {line.split(' | ')[0][2:]: line.split(' | ') for line in table.split('\n')}
    # train / softmax: 1.04, 1.10, 1.01; train / FLatten: 1.04, 0.55, 1.01 (not 104 / 100)
    assert lines['LiSA-PVT-T'][4:6] == ['1.04x (1.01–1.10) / 1.00x (1.00–1.00)',
                                        '1.01x (0.55–1.04) / 1.00x (1.00–1.00)']


def test_dense_table_adds_the_counted_flops_and_their_ratios():
    rows = [row('pvt', 'PVT-T', (1, 1), (1, 1)), row('pvt', 'FLatten-PVT-T', (1, 1), (1, 1)),
            row('pvt', 'LiSA-PVT-T', (1, 1), (1, 1))]
    for r, (train, infer) in zip(rows, [(2.0e9, 8.0e9), (1.6e9, 5.0e9), (1.7e9, 5.5e9)]):
        r['train_flops'], r['infer_flops'] = train, infer
    table = bench.dense_table(rows, (64, 64), (64, 128)).split('\n\n')[1]
    lines = {line.split(' | ')[0][2:]: line.split(' | ') for line in table.split('\n')}
    assert lines['model'][1] == 'GFLOPs 64×64 / 64×128 (forward, counted)'
    # 1.7 / 2.0 = 0.85, 5.5 / 8 = 0.6875; 1.7 / 1.6 = 1.0625, 5.5 / 5 = 1.1
    assert lines['LiSA-PVT-T'][1:] == ['1.7 / 5.5', '0.850x / 0.688x', '1.062x / 1.100x |']
    assert 'GFLOPs' not in bench.dense_table([{k: v for k, v in r.items() if 'flops' not in k} for r in rows],
                                             (64, 64), (64, 128))


def test_results_are_written_as_json_and_markdown_also_where_asked(tmp_path):
    rows = [row('pvt', 'PVT-T', (1, 2), (3, 4))]
    bench.write_results(tmp_path / 'out', 'bench', 'setting', rows, 'table', tmp_path / 'docs' / 'bench.md')
    assert json.loads((tmp_path / 'out' / 'bench.json').read_text()) == {'setting': 'setting', 'rows': rows}
    assert (tmp_path / 'out' / 'bench.md').read_text() == (tmp_path / 'docs' / 'bench.md').read_text() == (
        'setting\n\ntable\n')


@pytest.mark.slow
def test_dense_benchmark_times_the_three_pvt_models_and_writes_the_markdown(tmp_path):
    benchmark_model.main(['--dense', '--families', 'pvt', '--train-size', '64', '64', '--infer-size', '64', '96',
                          '--repeats', '1', '--warmup', '1', '--threads', '1', '--out', str(tmp_path),
                          '--processes', '2', '--markdown', str(tmp_path / 'docs' / 'dense.md')])
    rows = json.loads((tmp_path / 'benchmark_dense.json').read_text())['rows']
    assert [r['model'] for r in rows] == ['PVT-T', 'FLatten-PVT-T', 'LiSA-PVT-T']
    for i in range(2):  # each process wrote its own rows
        own = json.loads((tmp_path / f'process{i}' / 'benchmark_dense.json').read_text())['rows']
        assert [r['processes'][i] for r in rows] == own
    assert all(r[f'{k}_{c}_ms'] > 0 for r in rows for k in ('train', 'infer') for c in ('cpu', 'wall'))
    table = (tmp_path / 'docs' / 'dense.md').read_text()
    assert table == (tmp_path / 'benchmark_dense.md').read_text()
    assert '| LiSA-PVT-T | Semantic FPN backbone + neck |' in table and 'inference 64×96' in table
    # the parent counts the FLOPs once, the processes do not; LiSA adds the walk and the local branch to FLatten
    assert 'GFLOPs 64×64 / 64×96' in table and not any('train_flops' in p for r in rows for p in r['processes'])
    flatten, lisa = rows[1], rows[2]
    assert lisa['train_flops'] > flatten['train_flops'] and lisa['infer_flops'] > flatten['infer_flops']
    assert lisa['infer_flops'] > lisa['train_flops']  # 64 x 96 > 64 x 64


@pytest.mark.slow
def test_dense_parts_are_the_configs_backbone_and_neck():
    """What is timed: the config's backbone (with its attention) and, for Semantic FPN, the FPN neck."""
    fpn = bench.DenseParts(ROOT / 'configs/segmentation/fpn_flatten-pvt-t_8xb4-40k_ade20k-512x512.py',
                           ('backbone', 'neck'))
    assert type(fpn.backbone).__name__ == 'LiSAPVT' and type(fpn.neck).__name__ == 'FPN'
    assert type(fpn.backbone.stages[0].blocks[0].attn).__name__ == 'FocusedLinearAttention'
    swin = bench.DenseParts(ROOT / 'configs/segmentation/upernet_lisa-swin-t_8xb2-160k_ade20k-512x512.py',
                            ('backbone', ))
    assert swin.neck is None and type(swin.backbone).__name__ == 'LiSASwinTransformer'
    outs = fpn(torch.randn(1, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == [(1, 256, 16 // 2 ** i, 16 // 2 ** i) for i in range(4)]


@pytest.mark.parametrize('argv, message', [
    (['--dense', '--train-size', '16', '512'], '--train-size=[16, 512]: both sides must be >= 32'),
    (['--dense', '--batch', '0'], '--batch=0 must be >= 1'),
    (['--dense', '--processes', '0'], '--processes=0 must be >= 1'),
])
def test_dense_options_refuse_bad_values_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit):
        benchmark_model.parse_args(argv)
    assert message in capsys.readouterr().err
