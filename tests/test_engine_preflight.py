"""``tools/train.py CONFIG --dry-run``: the whole set-up and one step in minutes, non-zero exit on any problem.

On the demo configs with tiny synthetic data (slow: each run imports the mm
libraries and builds a model). The recipe lines are checked against the
config's own values.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_toy import from_scratch

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'
DET_DEMO = ROOT / 'configs/detection/demo/mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96.py'
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def workspace(tmp_path_factory) -> Path:
    from test_downstream_training import DATA

    from projects.lisa.synthetic import generate
    cwd = tmp_path_factory.mktemp('preflight')
    generate('ade20k', cwd / 'data' / 'synthetic', **{**DATA, 'num_train': 4, 'num_val': 2})
    generate('coco', cwd / 'data' / 'synthetic', num_train=4, num_val=2, size=96)
    return cwd


def dry_run(workspace: Path, config: Path, *options: str) -> tuple[subprocess.CompletedProcess, float]:
    from test_downstream_training import environment
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / 'tools/train.py'), str(config), '--dry-run',
                           '--work-dir', str(workspace / 'work_dirs' / config.stem), *from_scratch(list(options))],
                          cwd=workspace, env=environment(), capture_output=True, text=True, timeout=300)
    return proc, time.monotonic() - start


def test_dry_run_of_the_segmentation_demo_passes_and_prints_the_recipe(workspace):
    proc, seconds = dry_run(workspace, SEG_DEMO)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert seconds < 120
    # the verdict first, a screen of the tool's own lines; the libraries' output (the Runner's environment and
    # config dump, their warnings) in the log the last line names
    lines = (proc.stdout + proc.stderr).splitlines()
    assert lines[0] == '[preflight] OK: the config builds, loads, reads its data and trains one finite step'
    assert len(lines) < 40 and 'Warning' not in proc.stdout + proc.stderr
    log = workspace / 'work_dirs' / SEG_DEMO.stem / 'preflight.log'
    assert lines[-1].startswith("[preflight] the libraries' own output") and str(log) in lines[-1]
    assert 'System environment:' in log.read_text() and 'UserWarning' in log.read_text()
    for stage in ('build the model', 'load the initial weights', 'read one batch of train_dataloader',
                  'read one batch of val_dataloader', 'read one batch of test_dataloader', 'one training step'):
        assert f'[preflight] {stage}: ok' in out
    assert "optimizer: OptimWrapper(type=AdamW, lr=0.0002, weight_decay=0.0001)" in out
    assert 'batch: 4 per GPU x 1 GPU(s) = 4 images per step' in out
    assert 'PolyLR(begin=0, end=150, by_epoch=False, eta_min=0.0, power=0.9)' in out
    assert 'RandomCrop(crop_size=(96, 96))' in out
    assert 'model.backbone.drop_path_rate=0.1' in out
    assert 'weight decay 0.0001' in out
    assert 'OK: the config builds' in out
    assert not list((workspace / 'work_dirs' / SEG_DEMO.stem).glob('*.pth'))  # a dry run trains nothing for real


def test_dry_run_of_the_detection_demo_passes(workspace):
    proc, seconds = dry_run(workspace, DET_DEMO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert seconds < 120
    assert 'MultiStepLR' in proc.stdout and 'OK: the config builds' in proc.stdout


def test_dry_run_fails_on_a_nonfinite_loss_and_gradients(workspace):
    proc, _ = dry_run(workspace, SEG_DEMO, '--cfg-options', 'model.decode_head.loss_decode.loss_weight=nan')
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    found = [line for line in lines if line.startswith('  - ')]
    assert lines[0] == f'[preflight] {len(found)} problem(s):' and lines[1:1 + len(found)] == found  # first
    assert '  - one training step: non-finite loss loss=nan' in found
    assert any(line.startswith('  - one training step: non-finite gradients in') for line in found)
    assert '[preflight] one training step: FAILED' in lines


def test_dry_run_fails_on_initial_weights_that_do_not_exist_and_shows_the_config_on_request(workspace):
    proc, _ = dry_run(workspace, SEG_DEMO, '--show-config', '--cfg-options', 'load_from=pretrain/missing.pth')
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == '[preflight] 1 problem(s):'
    assert lines[1].startswith('  - load_from pretrain/missing.pth: FileNotFoundError')
    assert "load_from = 'pretrain/missing.pth'" in proc.stdout.split('[preflight] config:')[1]  # the config given


def test_dry_run_names_a_head_of_other_classes_than_the_data_and_both_settings(workspace):
    # Training on it fails with a bare `IndexError: Target 36 is out of bounds`.
    proc, _ = dry_run(workspace, SEG_DEMO, '--cfg-options', 'model.decode_head.num_classes=20')
    assert proc.returncode == 1
    assert ('  - train_dataloader vs the model: model.decode_head.num_classes=20: the model predicts 20 classes '
            'but train_dataloader.dataset (ADE20KDataset) has 150') in proc.stdout
    assert "valid: model.decode_head.num_classes=150, or a dataset of 20 classes" in proc.stdout
