"""Fig. 3's three runs per setting: tools/dist_train_seeds.sh and tools/report_seeds.py.

References: mean and sample standard deviation computed here by numpy, and MMEngine's own
``vis_data/scalars.json`` format (one JSON object per logged step).
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tools import report_seeds

ROOT = Path(__file__).resolve().parents[1]


def write_run(run: Path, timestamp: str, top1: list[float]) -> None:
    """A run's log as MMEngine writes it: training lines, then one validation line per epoch."""
    log = run / timestamp / 'vis_data' / 'scalars.json'
    log.parent.mkdir(parents=True)
    lines = []
    for epoch, value in enumerate(top1, 1):
        lines += [{'lr': 1e-3, 'loss': 2.0, 'epoch': epoch, 'iter': 10 * epoch, 'step': 10 * epoch},
                  {'accuracy/top1': value, 'accuracy/top5': 99.0, 'step': epoch}]
    log.write_text(''.join(json.dumps(line) + '\n' for line in lines))


def test_report_gives_mean_and_sample_std_of_the_last_validation_of_each_seed(tmp_path, capsys):
    work = tmp_path / 'deit-tiny_lisa-t3_8xb128_mini-imagenet'
    write_run(work / 'seed0', '20260101_000000', [50.0, 75.0])
    write_run(work / 'seed1', '20260101_000000', [60.0, 76.5])
    write_run(work / 'seed2', '20260101_000000', [40.0, 77.0])  # interrupted...
    write_run(work / 'seed2', '20260102_000000', [74.0])  # ...resumed: the newer log counts
    (work / 'seed2' / '20260103_000000').mkdir()  # a later attempt that logged nothing
    (work / 'notes').mkdir()
    report_seeds.main([str(work), '--json', str(tmp_path / 'rows.json')])
    values = np.array([75.0, 76.5, 74.0])
    (row, ) = json.loads((tmp_path / 'rows.json').read_text())
    assert row['seeds'] == [0, 1, 2] and row['values'] == values.tolist()
    assert row['mean'] == pytest.approx(values.mean()) and row['std'] == pytest.approx(values.std(ddof=1))
    table = capsys.readouterr().out
    assert f'| {work.name} | 75.17 ± {values.std(ddof=1):.2f} | 0: 75.00, 1: 76.50, 2: 74.00 |' in table


def test_report_max_takes_each_run_best_and_missing_runs_are_named(tmp_path, capsys):
    work = tmp_path / 'cfg'
    write_run(work / 'seed3', '20260101_000000', [70.0, 65.0])
    write_run(work / 'seed10', '20260101_000000', [60.0, 62.0])
    assert report_seeds.summarise(work, 'accuracy/top1', 'max')['values'] == [70.0, 62.0]  # seeds in numeric order
    with pytest.raises(SystemExit, match=r'holds no seed<S> run folders'):
        report_seeds.main([str(tmp_path / 'empty')])
    with pytest.raises(SystemExit, match=r"no 'accuracy/top5x' in any"):
        report_seeds.main([str(work), '--metric', 'accuracy/top5x'])


def test_seed_launcher_refuses_a_seed_that_is_not_a_non_negative_integer():
    proc = subprocess.run(['bash', str(ROOT / 'tools' / 'dist_train_seeds.sh'), 'cfg.py', '1', '0', 'x1'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "seed 'x1' is not a non-negative integer" in proc.stderr
