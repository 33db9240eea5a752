"""``tools/collect_results.py``: which run is which row, which metric file wins, the paper beside ours.

References: the paper's numbers as ``lisa-paper.md`` gives them (written out here), the config
names of ``configs/`` with the row each stands for (derived here from the names' fields),
Python's ``statistics`` (mean and sample std over seeds), and, end to end, the metric line
MMEngine itself logs at the end of a real ``mim test`` (``test_end_to_end_*``, slow).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from projects.lisa.analysis import results
from projects.lisa.analysis.results import Row, Run, compare, find_runs, parse_config_name, table_13

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'
TOOL = ROOT / 'tools' / 'collect_results.py'

MODELS = {'deit-tiny': 'DeiT-T', 'deit-small': 'DeiT-S', 'pvt-tiny': 'PVT-T', 'pvt-small': 'PVT-S',
          'swin-tiny': 'Swin-T'}
ATTENTIONS = {'softmax': 'softmax', 'flatten': 'FLatten', 'lisa': 'LiSA'}
TABLE_5_NAMES = {'angular': 'linear angular', 'linear': 'linear'}  # Table 5's rows beyond Table 1's attentions


def expected_rows(path: Path) -> set[tuple[str, str]]:
    """The (table, row) of a Table 1 / 2 / 3 / 4 / 5 config, read off its name's fields; none for a run started
    from softmax ImageNet weights (``*_softmax-in1k-pre_*``), which is not the paper's protocol."""
    fields = path.stem.split('_')
    if 'softmax-in1k-pre' in fields:
        return set()
    if 'biformer' in path.stem:  # Table 2: biformer-{size}_{bra,lisa}, fpn_{,lisa-}biformer-s
        name = 'LiSA' if 'lisa' in fields[:2] or fields[1].startswith('lisa-') else 'BiFormer'
        if path.parent.name == 'segmentation':
            return {('Table 2', f'BiFormer-S Semantic FPN ADE20K / {name}')}
        return {('Table 2', f'BiFormer-{fields[0].split("-")[1][0].upper()} / {name}')}
    if path.parent.name == 'classification':
        model, attention, _, data = fields
        size = '384' if data.endswith('384px') else '224'
        table_5 = {('Table 5', f'DeiT-S / {TABLE_5_NAMES.get(attention, ATTENTIONS.get(attention))}')}
        rows = {('Table 1', f'{MODELS[model]} {size} / {ATTENTIONS[attention]}')} if attention in ATTENTIONS else set()
        return rows | (table_5 if model == 'deit-small' else set())
    backbone = fields[1].split('-', 1)[-1] if fields[1].startswith(('lisa-', 'flatten-')) else fields[1]
    attention = fields[1].split('-')[0]
    base = {'pvt-t': 'PVT-T', 'swin-t': 'Swin-T'}[backbone]
    if path.parent.name == 'segmentation':
        head = {'fpn': 'Semantic FPN', 'upernet': 'UperNet'}[fields[0]]
        name = ATTENTIONS.get(attention, base.split('-')[0])
        return {('Table 3', f'{base} {head} / {name}')}
    return {('Table 4', f'{base} / {ATTENTIONS.get(attention, base)}')}


TABLE_CONFIGS = sorted([*CONFIGS.glob('classification/*.py'), *CONFIGS.glob('segmentation/*.py'),
                        *CONFIGS.glob('detection/*.py')])


def rows_of(config: str) -> set[tuple[str, str]]:
    run = Run(config, Path(config), {}, Path(config), 'test')
    return {(row.table, row.label) for row in results.ROWS if isinstance(row, Row) and results.matches(row, run)}


@pytest.mark.parametrize('path', TABLE_CONFIGS, ids=lambda p: p.name)
def test_every_table_config_fills_exactly_the_rows_its_name_says(path):
    assert rows_of(path.stem) == expected_rows(path)


def test_config_name_splits_into_model_key_and_data_whatever_the_schedule_field():
    assert parse_config_name('fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py') == ('fpn_lisa-pvt-t', 'ade20k-512x512')
    assert parse_config_name('mask-rcnn_lisa-swin-t_fpn_ms-crop-1x_coco') == ('mask-rcnn_lisa-swin-t_fpn', 'coco')
    assert parse_config_name('deit-tiny_lisa-t5-elu_8xb128_mini-imagenet') == ('deit-tiny_lisa-t5-elu',
                                                                              'mini-imagenet')
    assert parse_config_name('one_process') == ('one', 'process') and parse_config_name('x') == ('x', '')


def test_ablation_rows_take_mini_imagenet_runs_and_not_imagenet_1k_ones():
    assert rows_of('deit-tiny_lisa-t5_8xb128_mini-imagenet') == {
        ('Fig. 3', 'DeiT-T, T = 5'), ('Table 6', 'DeiT-T / learned alpha'), ('Table 7', 'DeiT-T GL + F + D'),
        ('Table 8', 'DeiT-T / ReLU')}
    assert rows_of('deit-tiny_lisa_8xb128_mini-imagenet') == {('Fig. 3', 'DeiT-T, T = 3')}
    assert rows_of('deit-tiny_lisa-t5_8xb128_in1k') == set()


def test_demo_configs_stand_in_for_the_pvt_t_lisa_rows_of_tables_1_3_4():
    demos = {p.parent.parent.name: rows_of(p.stem) for p in CONFIGS.glob('*/demo/*.py')}
    assert demos == {'classification': {('Table 1', 'PVT-T 224 / LiSA')},
                     'segmentation': {('Table 3', 'PVT-T Semantic FPN / LiSA')},
                     'detection': {('Table 4', 'PVT-T / LiSA')}}


def test_paper_values_are_those_of_the_paper():
    rows = {(r.table, r.label): r for r in results.ROWS}
    assert rows['Table 1', 'DeiT-T 384 / LiSA'].paper == {'top-1': 77.54}
    assert rows['Table 3', 'PVT-T Semantic FPN / LiSA'].paper == {'mIoU': 40.85, 'mAcc': 51.75}
    assert rows['Table 4', 'Swin-T / Swin-T'].paper['box AP'] == 43.7
    assert rows['Table 4', 'PVT-T: LiSA - PVT-T'].paper == {'box AP': pytest.approx(40.5 - 36.7), 'box AP50': 3.7,
                                                           'box AP75': 4.8, 'mask AP': pytest.approx(37.6 - 35.1),
                                                           'mask AP50': 3.0, 'mask AP75': 2.9}
    assert rows['Fig. 3', 'DeiT-T, T = 4'].paper_std == {'top-1': 0.13}
    assert rows['Table 5', 'DeiT-S / linear angular'].paper == {'top-1': 79.21}
    assert rows['Table 7', 'DeiT-T LA + D'].paper == {'top-1': 73.3}
    assert rows['Table 2', 'BiFormer-S Semantic FPN ADE20K / LiSA'].paper == {'mIoU': 49.5}
    assert {r.table for r in results.ROWS} | {'Table 13'} == set(results.TABLES)


# ------------------------------------------------------------------ work dirs as MMEngine writes them

def work_dir(root: Path, name: str, config: str, test: dict | None = None, val: list[dict] | None = None,
             stamp: str = '20260101_000000') -> Path:
    """A work dir: the dumped config, a run folder with its validation scalars and/or its test JSON."""
    path = root / name
    run = path / stamp
    (run / 'vis_data').mkdir(parents=True)
    (path / f'{config}.py').write_text('# dumped\n')
    lines = [{'loss': 1.0, 'step': 1}, *(val or [])]
    (run / 'vis_data' / 'scalars.json').write_text(''.join(json.dumps(line) + '\n' for line in lines))
    if test is not None:
        (run / f'{stamp}.json').write_text(json.dumps(test))
    return path


PVT_LISA_DET = 'mask-rcnn_lisa-pvt-t_fpn_1x_coco'
PVT_DET = 'mask-rcnn_pvt-t_fpn_1x_coco'


def coco(box: float, box50: float) -> dict:
    return {'coco/bbox_mAP': box, 'coco/bbox_mAP_50': box50, 'coco/segm_mAP': box / 2}


def entry(entries, table: str, row: str, metric: str):
    (found, ) = [e for e in entries if (e.table, e.row, e.metric) == (table, row, metric)]
    return found


def test_test_result_wins_over_validation_and_a_nested_test_dir_is_its_training_run(tmp_path):
    train = work_dir(tmp_path, 'det', PVT_LISA_DET, val=[coco(0.10, 0.20), coco(0.30, 0.50)])
    work_dir(train, 'test', PVT_LISA_DET, test=coco(0.41, 0.62))
    work_dir(tmp_path, 'seg', 'fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512', val=[{'mIoU': 30.0, 'mAcc': 40.0, 'step': 9}])
    runs = find_runs([tmp_path])
    assert sorted((r.config, r.kind, r.work_dir) for r in runs) == [
        ('fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512', 'val', tmp_path / 'seg'), (PVT_LISA_DET, 'test', train)]
    assert next(r for r in runs if r.kind == 'test').source.parent.parent == train / 'test'
    entries = compare(runs)
    box = entry(entries, 'Table 4', 'PVT-T / LiSA', 'box AP')
    assert (box.ours, box.paper, box.difference) == (pytest.approx(41.0), 40.5, pytest.approx(0.5))
    assert entry(entries, 'Table 4', 'PVT-T / LiSA', 'box AP50').ours == pytest.approx(62.0)
    assert entry(entries, 'Table 3', 'PVT-T Semantic FPN / LiSA', 'mIoU').difference == pytest.approx(30.0 - 40.85)
    assert entry(entries, 'Table 4', 'PVT-T / PVT-T', 'box AP').ours is None  # no run: missing


def test_later_run_folder_of_a_work_dir_is_its_result(tmp_path):
    path = work_dir(tmp_path, 'cls', 'pvt-tiny_lisa_8xb128_in1k', test={'accuracy/top1': 70.0})
    work_dir(tmp_path, 'cls', 'pvt-tiny_lisa_8xb128_in1k', test={'accuracy/top1': 71.0}, stamp='20260102_000000')
    (run, ) = find_runs([tmp_path])
    assert (run.metrics['top-1'], run.source) == (71.0, path / '20260102_000000' / '20260102_000000.json')


def test_seeds_give_mean_and_sample_std_and_gains_subtract_the_rows(tmp_path):
    tops = [75.1, 76.0, 75.8]
    for seed, top in enumerate(tops):
        work_dir(tmp_path, f'seed{seed}', 'deit-tiny_lisa-t3_8xb128_mini-imagenet', test={'accuracy/top1': top})
    work_dir(tmp_path, 'a', PVT_LISA_DET, test=coco(0.40, 0.60))
    work_dir(tmp_path, 'b', PVT_DET, test=coco(0.37, 0.58))
    entries = compare(find_runs([tmp_path]))
    fig3 = entry(entries, 'Fig. 3', 'DeiT-T, T = 3', 'top-1')
    assert (fig3.ours, fig3.ours_std, len(fig3.runs)) == (pytest.approx(statistics.mean(tops)),
                                                          pytest.approx(statistics.stdev(tops)), 3)
    assert (fig3.paper, fig3.paper_std) == (75.63, 0.39)
    gain = entry(entries, 'Table 4', 'PVT-T: LiSA - PVT-T', 'box AP50')
    assert (gain.ours, gain.paper) == (pytest.approx(2.0), 3.7)
    assert gain.difference == pytest.approx(2.0 - 3.7)


def test_generated_data_fills_its_row_without_a_difference_and_real_data_wins(tmp_path):
    work_dir(tmp_path, 'demo', 'pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px', test={'accuracy/top1': 95.0})
    (pvt, ) = [e for e in compare(find_runs([tmp_path])) if e.row == 'PVT-T 224 / LiSA']
    assert (pvt.ours, pvt.synthetic, pvt.difference, pvt.data) == (95.0, True, None, 'synthetic-imagenet-64px')
    assert "synthetic-imagenet-64px: not the paper's data" in results.to_markdown([pvt])
    work_dir(tmp_path, 'real', 'pvt-tiny_lisa_8xb128_in1k', test={'accuracy/top1': 78.0})
    (pvt, ) = [e for e in compare(find_runs([tmp_path])) if e.row == 'PVT-T 224 / LiSA']
    assert (pvt.ours, pvt.synthetic, pvt.difference) == (78.0, False, pytest.approx(78.0 - 78.53))


def test_table_13_reads_the_model_benchmark_and_compares_ratios_to_flatten():
    rows = [{'attention': 'flatten', 'tokens': 16385, 'train_ms': 100.0, 'saved': 2 * 2 ** 20},
            {'attention': 'lisa', 'tokens': 16385, 'train_ms': 110.0, 'saved': 3 * 2 ** 20}]
    entries = table_13(rows)
    ratio = entry(entries, 'Table 13', '16,385 tokens / LiSA over FLatten', 'latency ratio')
    assert (ratio.ours, ratio.paper) == (pytest.approx(1.1), pytest.approx(161.71 / 91.84))
    assert entry(entries, 'Table 13', '16,385 tokens / LiSA over FLatten', 'memory ratio').ours == pytest.approx(1.5)
    assert entry(entries, 'Table 13', '16,385 tokens / lisa', 'memory MB').ours == pytest.approx(3.0)
    assert entry(entries, 'Table 13', '197 tokens / lisa', 'latency ms').ours is None


def run_tool(*args: str) -> str:
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow  # runs the tool in a subprocess (imports the mm packages)
def test_tool_prints_every_table_with_all_marks_missing_rows_and_writes_json(tmp_path):
    work_dir(tmp_path / 'runs', 'a', PVT_LISA_DET, test=coco(0.40, 0.60))
    work_dir(tmp_path / 'runs', 'odd', 'one_process', test={'mIoU': 1.0})
    out = run_tool(str(tmp_path / 'runs'), '--all', '--json', str(tmp_path / 'r.json'))
    assert all(f'### {table}:' in out for table in results.TABLES)
    # Table 4 (box AP, AP50, AP75, mask AP, AP50, AP75): ours / paper (ours - paper) where the paper has one
    lisa = '| PVT-T / LiSA | 40.00 / 40.50 (-0.50) | 60.00 | missing | 20.00 / 37.60 (-17.60) | missing | missing | 1 |'
    assert lisa in out
    assert ('| PVT-T / PVT-T | missing (paper 36.70) | missing | missing | missing (paper 35.10) | missing | missing '
            '| 0 |') in out
    assert '| PVT-T 224 / LiSA | 78.53 | missing | - | 0 |' in out  # one metric: paper, ours, difference
    assert 'not a row of the paper\'s tables' in out and 'one_process' in out
    written = json.loads((tmp_path / 'r.json').read_text())
    assert {e['table'] for e in written} == set(results.TABLES)
    (ap50, ) = [e for e in written if (e['table'], e['row'], e['metric']) == ('Table 4', 'PVT-T / LiSA', 'box AP50')]
    assert (ap50['ours'], ap50['paper'], ap50['difference'], ap50['synthetic']) == (pytest.approx(60.0), None, None,
                                                                                     False)


def test_tool_says_what_it_found_first_and_prints_only_the_rows_with_figures(tmp_path):
    work_dir(tmp_path / 'runs', 'a', PVT_LISA_DET, test=coco(0.40, 0.60))
    out = run_tool(str(tmp_path / 'runs'))
    assert out.splitlines()[0] == f'1 runs found under {tmp_path / "runs"}; 1 table rows with figures.'
    table_rows = [line for line in out.splitlines() if line.startswith('| ') and not line.startswith('| row |')]
    assert table_rows == [
        '| PVT-T / LiSA | 40.00 / 40.50 (-0.50) | 60.00 | missing | 20.00 / 37.60 (-17.60) | missing | missing | 1 |']
    assert '### Table 4:' in out and '### Table 1:' not in out
    # every row on request; a difference of rows the paper reports but no run gave reads as the paper's alone
    everything = run_tool(str(tmp_path / 'runs'), '--all')
    gain = next(line for line in everything.splitlines() if line.startswith('| PVT-T: LiSA - PVT-T |'))
    assert gain.startswith('| PVT-T: LiSA - PVT-T | missing (paper +3.80) | missing (paper +3.70) |')
    assert 'missing / ' not in everything


@pytest.mark.slow  # runs the tool in a subprocess (imports the mm packages)
def test_tool_refuses_a_missing_work_dir(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), str(tmp_path / 'nope')], capture_output=True, text=True,
                          env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=120)
    assert proc.returncode == 2 and f'work dir {tmp_path / "nope"} does not exist' in proc.stderr


# ------------------------------------------------------------------ end to end on a real run

@pytest.mark.slow
def test_end_to_end_tool_reports_the_top1_mmengine_logged_for_a_real_mim_test(tmp_path):
    from projects.lisa.synthetic import generate
    config = CONFIGS / 'classification' / 'demo' / 'pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px.py'
    generate('imagenet', tmp_path / 'data' / 'synthetic', num_train=8, num_val=10, size=64, seed=0)
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    mim = str(Path(sys.executable).with_name('mim'))
    work = tmp_path / 'work_dirs' / 'cls'
    for cmd in ([mim, 'train', 'mmpretrain', str(config), '--work-dir', str(work), '--cfg-options',
                 'train_cfg.max_epochs=1', 'train_cfg.val_interval=1'],
                [mim, 'test', 'mmpretrain', str(config), '--checkpoint', str(work / 'epoch_1.pth'),
                 '--work-dir', str(work / 'test')]):
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    logged = float(re.search(r'Epoch\(test\).*accuracy/top1: ([\d.]+)', proc.stdout + proc.stderr).group(1))
    (run, ) = find_runs([tmp_path / 'work_dirs'])
    assert (run.config, run.kind, run.work_dir) == (config.stem, 'test', work)
    assert run.metrics['top-1'] == pytest.approx(logged, abs=1e-4)
    out = run_tool(str(tmp_path / 'work_dirs'), '--found-only')
    assert '### Table 1:' in out and '### Table 3:' not in out
    assert f"| PVT-T 224 / LiSA (synthetic-imagenet-64px: not the paper's data) | 78.53 | {logged:.2f} | - | 1 |" \
        in out
