"""``tools/analyze_logs.py plot_curve``: the curves of chosen keys of MMEngine's ``scalars.json``.

References: the logs MMEngine itself writes for the toy of ``engine_toy`` trained by epoch (the
lines read back here with ``json``), and logs written by hand in the format an iteration-based
mmseg run logs (validation ``step`` = iteration). The plotted series are read back from the
figure's lines; the PNG from the file with matplotlib.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from projects.lisa.analysis import curves

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / 'tools' / 'analyze_logs.py'

SEG_LOG = [  # an iteration-based mmseg run: val step = iteration, the metric as mmseg names it
    {'lr': 0.01, 'loss': 2.0, 'decode.loss_ce': 2.0, 'time': 1.0, 'iter': 50, 'step': 50},
    {'lr': 0.005, 'loss': 1.0, 'decode.loss_ce': 1.0, 'time': 1.0, 'iter': 100, 'step': 100},
    {'aAcc': 70.0, 'mIoU': 30.0, 'mAcc': 40.0, 'data_time': 0.1, 'time': 0.2, 'step': 100},
    {'lr': 0.001, 'loss': 0.5, 'decode.loss_ce': 0.5, 'time': 1.0, 'iter': 150, 'step': 150},
    {'aAcc': 80.0, 'mIoU': 35.0, 'mAcc': 45.0, 'data_time': 0.1, 'time': 0.2, 'step': 150},
]


def write(work_dir: Path, timestamp: str, lines: list[dict]) -> Path:
    log = work_dir / timestamp / 'vis_data' / 'scalars.json'
    log.parent.mkdir(parents=True)
    log.write_text(''.join(json.dumps(line) + '\n' for line in lines))
    return log


def plotted(figure) -> dict[str, dict[str, tuple[list, list]]]:
    """Per subplot (its y label): each line's label -> (x, y), as drawn."""
    return {ax.get_ylabel(): {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                              for line in ax.get_lines()} for ax in figure.axes}


@pytest.fixture(scope='module')
def epoch_run(tmp_path_factory) -> Path:
    """A real MMEngine log: the toy trained 2 epochs of 2 iterations, validated after each epoch."""
    import engine_toy
    from mmengine.config import Config
    from mmengine.runner import Runner

    work_dir = tmp_path_factory.mktemp('epoch_run')
    cfg = engine_toy.toy_config(str(work_dir), safe=False)
    loader = dict(batch_size=4, num_workers=0, dataset=dict(type='ToyRegressionDataset', length=8),
                  sampler=dict(type='DefaultSampler', shuffle=False), collate_fn=dict(type='pseudo_collate'))
    cfg.update(train_dataloader=loader, val_dataloader=loader, val_evaluator=dict(type='ToyMSE'),
               val_cfg=dict(type='ValLoop'), train_cfg=dict(type='EpochBasedTrainLoop', max_epochs=2, val_interval=1),
               param_scheduler=[], log_processor=dict(window_size=1, by_epoch=True))
    cfg['default_hooks'] = dict(logger=dict(type='LoggerHook', interval=1), checkpoint=None)
    Runner.from_cfg(Config(cfg)).train()
    return work_dir


def test_a_real_epoch_based_log_plots_loss_by_iteration_and_the_metric_by_epoch(epoch_run, tmp_path):
    (log, ) = epoch_run.glob('*/vis_data/scalars.json')
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    train = [line for line in lines if 'loss' in line]
    val = [line for line in lines if 'mse' in line]
    assert len(train) == 4 and len(val) == 2  # 2 epochs of 2 iterations, a validation after each

    figure = curves.plot_runs([epoch_run], ['loss', 'lr', 'mse'], tmp_path / 'c.png')
    drawn = plotted(figure)
    name = epoch_run.name
    assert drawn['loss'][name] == ([line['iter'] for line in train], [line['loss'] for line in train])
    assert drawn['lr'][name] == ([line['iter'] for line in train], [line['lr'] for line in train])
    assert drawn['mse'][name] == ([1, 2], [line['mse'] for line in val])  # after epochs 1 and 2
    assert [ax.get_xlabel() for ax in figure.axes] == ['iter', 'iter', 'epoch']


def test_an_iteration_based_log_plots_its_metric_by_iteration_and_keys_by_their_last_part(tmp_path):
    log = write(tmp_path / 'seg', '20260101_000000', SEG_LOG)
    series = curves.read_series(log, ['mIoU', 'loss_ce'])
    assert (series['mIoU'].x, series['mIoU'].y, series['mIoU'].x_name) == ([100, 150], [30.0, 35.0], 'iter')
    det = write(tmp_path / 'det', '20260101_000000', [{'loss': 1.0, 'iter': 8, 'epoch': 1, 'step': 8},
                                                       {'coco/bbox_mAP': 0.25, 'coco/bbox_mAP_50': 0.5, 'step': 1}])
    assert curves.read_series(det, ['bbox_mAP'])['bbox_mAP'] == curves.Series('coco/bbox_mAP', [1], [0.25], 'epoch')


def test_a_work_dir_stands_for_its_newest_start_that_logged_the_keys(tmp_path):
    write(tmp_path, '20260101_000000', SEG_LOG)
    newest = write(tmp_path, '20260102_000000', [{'loss': 0.1, 'lr': 0.0, 'iter': 200, 'step': 200}])
    write(tmp_path, '20260103_000000', [{'mIoU': 36.0, 'step': 0}])  # a later test: no loss
    assert curves.find_log(tmp_path, ['loss']) == newest
    assert curves.find_log(newest, ['mIoU']) == newest  # a file is taken as it is


def test_several_runs_share_each_subplot_and_the_png_is_written(tmp_path):
    import matplotlib.image

    a = write(tmp_path / 'a', '20260101_000000', SEG_LOG)
    write(tmp_path / 'b', '20260101_000000', [{**line, 'loss': line['loss'] * 2} if 'loss' in line else line
                                               for line in SEG_LOG])
    out = tmp_path / 'plots' / 'curves.png'
    figure = curves.plot_runs([a, tmp_path / 'b'], ['loss', 'mIoU'], out, legend=['A', 'B'], title='t')
    drawn = plotted(figure)
    assert drawn['loss'] == {'A': ([50, 100, 150], [2.0, 1.0, 0.5]), 'B': ([50, 100, 150], [4.0, 2.0, 1.0])}
    assert drawn['mIoU']['B'] == ([100, 150], [30.0, 35.0])
    assert matplotlib.image.imread(out).shape[:2] == (600, 800)  # 8 x 3 inches per key at 100 dpi


def test_bad_input_names_the_bad_value_and_what_is_valid(tmp_path):
    log = write(tmp_path / 'seg', '20260101_000000', SEG_LOG)
    with pytest.raises(ValueError, match=r"has no key 'bbox_mAP'; it holds: aAcc, data_time, decode\.loss_ce"):
        curves.read_series(log, ['bbox_mAP'])
    with pytest.raises(FileNotFoundError, match='neither a scalars.json nor a work dir'):
        curves.find_log(tmp_path / 'empty')
    two = write(tmp_path / 'two', '20260101_000000', [{'coco/bbox_mAP': 1.0, 'lvis/bbox_mAP': 2.0, 'step': 1}])
    with pytest.raises(ValueError, match="ambiguous.*'coco/bbox_mAP', 'lvis/bbox_mAP'"):
        curves.read_series(two, ['bbox_mAP'])
    with pytest.raises(ValueError, match='1 legend labels for 2 runs'):
        curves.plot_runs([log, log], ['loss'], tmp_path / 'x.png', legend=['A'])


def test_tool_plots_and_refuses_an_unknown_key(tmp_path):
    write(tmp_path / 'seg', '20260101_000000', SEG_LOG)
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    command = [sys.executable, str(TOOL), 'plot_curve', str(tmp_path / 'seg'), '--out', str(tmp_path / 'c.png')]
    proc = subprocess.run([*command, '--keys', 'loss', 'mIoU'], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f'loss, mIoU of 1 run(s) written to {tmp_path / "c.png"}\n' and proc.stderr == ''
    assert (tmp_path / 'c.png').stat().st_size > 0
    proc = subprocess.run([*command, '--keys', 'acc'], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "has no key 'acc'" in proc.stderr
