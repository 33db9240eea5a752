"""The resolution sweep of the dense models (projects.lisa.benchmarks.resolution) and its command line,
tools/benchmark_resolution.py."""
from __future__ import annotations

import json

import pytest

from projects.lisa.benchmarks import resolution as res
from tools import benchmark_resolution as tool

MiB = 2 ** 20


def infer_rows(times: dict, flops: dict, peaks: dict, backend: str = 'eager', threads: int = 1) -> list[dict]:
    """Rows of the PVT family as the sweep writes them: times in ms, FLOPs, peaks in MiB by (size, model)."""
    rows = []
    for (size, model), ms in times.items():
        rows.append(dict(kind='time', step='infer', backend=backend, threads=threads, size=size, model=model,
                         family='pvt', wall_ms=ms, cpu_ms=ms))
    for (size, model), peak in peaks.items():
        rows.append(dict(kind='memory', step='infer', backend=backend, threads=2, size=size, model=model,
                         family='pvt', peak=peak * MiB, flops=flops[size, model]))
    return rows


def test_ratio_checks_divide_the_time_ratio_by_the_flops_ratio():
    # 1024²: time 0.88 / FLOPs 0.80 = 1.10, on the bound; 2048²: 0.52 / 0.40 = 1.30, outside.
    rows = infer_rows({(1024, 'PVT-T'): 1000, (1024, 'LiSA-PVT-T'): 880, (2048, 'PVT-T'): 10000,
                       (2048, 'LiSA-PVT-T'): 5200},
                      {(1024, 'PVT-T'): 100, (1024, 'LiSA-PVT-T'): 80, (2048, 'PVT-T'): 1000,
                       (2048, 'LiSA-PVT-T'): 400},
                      {(1024, 'PVT-T'): 100, (1024, 'LiSA-PVT-T'): 90, (2048, 'PVT-T'): 500, (2048, 'LiSA-PVT-T'): 360})
    checks = res.ratio_checks(rows)
    assert [(c['size'], round(c['time_ratio'], 3), round(c['flops_ratio'], 3), c['holds']) for c in checks] == [
        (1024, 0.88, 0.8, True), (2048, 0.52, 0.4, False)]
    assert checks[1]['off'] == pytest.approx(0.3)
    growth = {(g['model'], g['size']): g for g in res.growth_checks(rows)}
    assert growth['PVT-T', 1024]['growth'] == pytest.approx(5.0) and not growth['PVT-T', 1024]['holds']
    assert growth['LiSA-PVT-T', 1024]['growth'] == pytest.approx(4.0) and growth['LiSA-PVT-T', 1024]['holds']


def test_report_states_what_did_not_fit_and_the_ratios_to_softmax():
    rows = infer_rows({(512, 'PVT-T'): 400, (512, 'LiSA-PVT-T'): 300}, {(512, 'PVT-T'): 50, (512, 'LiSA-PVT-T'): 40},
                      {(512, 'PVT-T'): 64, (512, 'LiSA-PVT-T'): 32})
    rows.append(dict(kind='memory', step='infer', backend='onnxruntime', threads=2, size=4096, model='PVT-T',
                     family='pvt', error='Failed to allocate memory for requested buffer of size 68719476736'))
    rows[0]['apart'] = True  # the family timed one model per process at that size
    rows.append({**rows[0], 'backend': 'onnxruntime', 'once': True})  # one cold run of PVT-T's export
    text = res.report(rows, 'a setting', 'python tools/benchmark_resolution.py')
    assert 'each model is timed in its own process, one after another: Semantic FPN (backbone, neck, head) at 512².' \
        in text
    assert "a session holds up to about twice that: onnxruntime's arena grows): PVT-T at 512²." in text
    assert '| 512² | LiSA-PVT-T | 0.0 | 0.800x | 300 (0.75x) |' in text
    assert '| eager 1 thr. | 512² | 0.750 | 0.800 | 0.938 | yes |' in text
    assert 'PVT-T at 4096² on onnxruntime (infer): Failed to allocate memory for requested buffer of size 68719476736' \
        in text
    table = res.beside_table_13(rows)
    assert '| paper, supp. Table 13: DeiT-T | GPU | 16,385 tokens | 1.76x | 2.12x |' in table


def test_a_size_beyond_the_memory_limit_is_reported_with_its_allocation(tmp_path):
    """The data limit makes the first oversized allocation fail, named, instead of the machine swapping."""
    found = res.in_subprocess('memory_worker', malloc_env=True, family='pvt', model='PVT-T', size=512,
                              backend='eager', threads=1, config_dir=str(tool.CONFIGS), out=str(tmp_path),
                              limit=20 * MiB)
    assert "can't allocate memory: you tried to allocate" in found['error'], found


@pytest.mark.parametrize('message,expected', [
    ('[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can\'t allocate memory: you tried to '
     'allocate 786432 bytes.', "can't allocate memory: you tried to allocate 786432 bytes."),
    ('[ONNXRuntimeError] : 1 : FAIL : ... bfc_arena.cc:360 Failed to allocate memory for requested buffer of size 64',
     'Failed to allocate memory for requested buffer of size 64'),
    ("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running BiasGelu node. "
     "Name:'BiasGelu' Status Message: std::bad_alloc", 'bad_alloc'),
    ('CUDA out of memory. Tried to allocate 64.00 GiB', 'out of memory. Tried to allocate 64.00 GiB'),
    ('shape mismatch', None)])
def test_allocation_errors_of_torch_onnxruntime_and_cuda_are_told_from_other_errors(message, expected):
    assert res.allocation_error(RuntimeError(message)) == expected


@pytest.mark.slow
def test_sweep_writes_rows_resumes_and_rewrites_the_report_from_them(tmp_path):
    argv = ['--sizes', '64', '128', '--families', 'pvt', '--backends', 'eager', '--threads', '1',
            '--train-size', '64', '--repeats', '1', '--warmup', '0', '--profile-size', '64',
            '--out', str(tmp_path / 'out'), '--markdown', str(tmp_path / 'docs' / 'performance.md')]
    tool.main(argv)
    rows = res.load_rows(tmp_path / 'out' / 'rows.jsonl')
    models = ['PVT-T', 'FLatten-PVT-T', 'LiSA-PVT-T']
    assert {(r['kind'], r['step'], r['size'], r['model']) for r in rows} == {
        (k, s, n, m) for k in ('memory', 'time') for s, n in (('infer', 64), ('infer', 128), ('train', 64),
                                                                ('train_cp', 64)) for m in models} | {
        ('profile', 'infer', 64, m) for m in models}
    infer = [r for r in rows if r['kind'] == 'memory' and r['step'] == 'infer']
    assert all(r['peak'] > 0 and r['flops'] > 0 for r in infer)
    flops = {(r['size'], r['model']): r['flops'] for r in infer}
    assert all(3.5 < flops[128, m] / flops[64, m] < 4.5 for m in models)  # 4x pixels, nearly 4x FLOPs
    doc = (tmp_path / 'docs' / 'performance.md').read_text()
    assert (tmp_path / 'docs' / 'performance.png').stat().st_size > 0
    assert 'Written by `python tools/benchmark_resolution.py --sizes 64 128' in doc
    assert '## Training step, batch 1, eager, all cores' in doc and '| LiSA-PVT-T | 64² |' in doc
    assert '## Where the time goes: Semantic FPN (backbone, neck, head), 64², eager, 1 thread' in doc
    tool.main(argv)  # resumes: everything is there, nothing is measured again
    assert res.load_rows(tmp_path / 'out' / 'rows.jsonl') == rows
    tool.main(['--from-rows', '--out', str(tmp_path / 'out'), *argv[:-4], '--markdown', str(tmp_path / 'again.md')])
    assert (tmp_path / 'again.md').read_text().split('\n', 3)[3] == doc.split('\n', 3)[3]


def test_profile_gives_the_speed_per_flop_of_softmax_attention_and_of_the_rest():
    # PVT-T: 600 ms of which 400 in flash attention for 40 of 50 GFLOPs -> 100 GFLOP/s there, 50 elsewhere.
    rows = [dict(kind='profile', step='infer', backend='eager', threads=1, size=2048, model=model, family='pvt',
                 ops=ops, flops_by=flops) for model, ops, flops in (
        ('PVT-T', {'aten::_scaled_dot_product_flash_attention_for_cpu': 400.0, 'aten::addmm': 200.0},
         {'scaled_dot_product_attention': 40e9, 'linear': 10e9}),
        ('LiSA-PVT-T', {'lisa::random_walk': 100.0, 'aten::addmm': 300.0}, {'random_walk': 6e9, 'linear': 14e9}))]
    lines = res.profile_tables(rows)
    assert '| PVT-T | 600, 50.0, 83.3 | 400, 40.0, 100.0 | 200, 10.0, 50.0 |' in lines
    assert '| LiSA-PVT-T | 400, 20.0, 50.0 | - | 400, 20.0, 50.0 |' in lines
    assert lines.index('| `aten::_scaled_dot_product_flash_attention_for_cpu` | 400 | 0 |') < lines.index(
        '| `aten::addmm` | 200 | 300 |')


@pytest.mark.parametrize('argv,message', [
    (['--sizes', '100'], 'size 100: must be a multiple of 32'),
    (['--threads', '0'], '--threads 0: must be between 1 and'),
    (['--device', 'cuda', '--backends', 'onnxruntime'], 'on --device cuda only eager runs'),
    (['--memory-limit', '0'], '--memory-limit=0.0 must be > 0 GiB'),
])
def test_invalid_options_are_refused_naming_the_value(argv, message, capsys):
    with pytest.raises(SystemExit):
        tool.parse_args(argv)
    assert message in capsys.readouterr().err


def test_rows_file_is_json_lines(tmp_path):
    path = tmp_path / 'rows.jsonl'
    path.write_text(json.dumps({'a': 1}) + '\n\n' + json.dumps({'b': 2}) + '\n')
    assert res.load_rows(path) == [{'a': 1}, {'b': 2}] and res.load_rows(tmp_path / 'none.jsonl') == []
