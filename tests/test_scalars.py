"""MMEngine's ``scalars.json`` (projects.lisa.analysis.scalars), on logs written by hand in MMEngine's format:
``<work dir>/<timestamp>/vis_data/scalars.json``, one JSON object a line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from projects.lisa.analysis import scalars

ROOT = Path(__file__).resolve().parents[1]

FIRST = [  # a run's first start: two training lines, one validation, a blank line
    {'lr': 0.1, 'data_time': 0.5, 'loss': 2.0, 'time': 1.5, 'iter': 10, 'step': 10},
    {'accuracy/top1': 40.0, 'step': 1},
    {},
    {'lr': 0.1, 'data_time': 0.5, 'loss': 1.5, 'time': 2.5, 'iter': 20, 'step': 20},
    {'accuracy/top1': 55.0, 'data_time': 0.1, 'time': 0.2, 'step': 2},  # validation lines carry a time too
]
RESUMED = [  # resumed later: trained on, validated worse
    {'lr': 0.01, 'data_time': 0.5, 'loss': 1.0, 'time': 3.5, 'iter': 30, 'step': 30},
    {'accuracy/top1': 50.0, 'step': 3},
]


def write(work_dir: Path, timestamp: str, lines: list[dict]) -> Path:
    log = work_dir / timestamp / 'vis_data' / 'scalars.json'
    log.parent.mkdir(parents=True)
    log.write_text(''.join((json.dumps(line) if line else '') + '\n' for line in lines))
    return log


@pytest.fixture
def run(tmp_path) -> Path:
    write(tmp_path, '20260102_000000', RESUMED)  # written first, named later: the folder's name orders them
    write(tmp_path, '20260101_000000', FIRST)
    (tmp_path / 'test' / '20260103_000000' / 'vis_data').mkdir(parents=True)  # a nested test: not a start
    return tmp_path


def test_logs_are_the_starts_of_the_work_dir_oldest_first(run):
    assert [log.parent.parent.name for log in scalars.scalars_files(run)] == ['20260101_000000', '20260102_000000']
    assert scalars.scalars_files(run / 'absent') == []


def test_values_and_the_last_validation_of_one_log(run):
    first = scalars.scalars_files(run)[0]
    assert len(scalars.entries(first)) == 4  # the blank line skipped
    assert scalars.values(first, 'loss') == [2.0, 1.5]
    assert scalars.last_entry(first, ['mIoU', 'accuracy/top1'])['accuracy/top1'] == 55.0
    assert scalars.last_entry(first, ['mIoU']) == {}


def test_run_metric_reads_the_newest_log_that_holds_it(run):
    assert scalars.run_metric(run, 'accuracy/top1') == 50.0  # the resumed start's last validation
    assert scalars.run_metric(run, 'accuracy/top1', 'max') == 50.0  # its best, not the older start's 55
    assert scalars.run_metric(run, 'data_time', 'max') == 0.5
    write(run, '20260104_000000', [{'lr': 0.01, 'loss': 0.9, 'time': 1.0, 'iter': 40, 'step': 40}])
    assert scalars.run_metric(run, 'accuracy/top1') == 50.0  # the newest start has not validated yet
    with pytest.raises(FileNotFoundError, match="no 'mIoU' in any"):
        scalars.run_metric(run, 'mIoU')


def test_training_values_leave_out_the_validation_lines(run):
    assert scalars.training_values(run, 'time') == [1.5, 2.5, 3.5]  # not the validation's 0.2
    assert scalars.training_values(run, 'loss') == [2.0, 1.5, 1.0]


def test_the_readers_of_results_import_with_the_standard_library_alone():
    """tools/collect_results.py and report_seeds.py read logs where neither torch nor scipy need be installed."""
    absent = ('numpy', 'scipy', 'torch', 'mmengine')
    code = (f'import sys; sys.modules.update(dict.fromkeys({absent!r})); '
            'import projects.lisa.analysis.results, projects.lisa.analysis.scalars, projects.lisa.analysis.paper; '
            'from projects.lisa.analysis.statistics import mean_std; assert mean_std([1.0, 3.0])[0] == 2.0')
    subprocess.run([sys.executable, '-c', code], cwd=ROOT, env={**os.environ, 'PYTHONPATH': str(ROOT)}, check=True)
