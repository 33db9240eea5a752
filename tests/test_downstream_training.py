"""End to end on the CPU (slow: a few minutes): real learning, multi-process, kill and resume.

Every run is a subprocess through the commands the README gives (``mim train``,
``mim test``, ``tools/train.py``, ``tools/dist_train.sh``, ``tools/dist_test.sh``)
on the demo's Semantic FPN + LiSA-PVT-T config and a small synthetic ADE20K.
References: mmseg's ``IoUMetric`` on a constant most-frequent-class prediction
(the baseline to beat), a single-process run with the same total batch (what
two processes must reproduce) and the run that was killed (what a resumed run
must continue).
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from projects.lisa.analysis.baselines import segmentation_baseline
from projects.lisa.synthetic import generate
from tools import demo

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'
TRAIN_ITERS = 40  # the demo trains 150; 40 already learns far beyond the baseline
MIM = str(Path(sys.executable).with_name('mim'))


DATA = {k: v for k, v in demo.SEG_DATA.items() if k != 'dataset'}  # the demo's ADE20K

# The demo config made deterministic for exact comparisons: fixed-size inputs without random
# augmentation, no dropout / drop-path, and GroupNorm in the head (BatchNorm statistics of
# 2 + 2 images differ from those of 4 by design; SyncBN needs CUDA).
DETERMINISTIC = """
_base_ = '{base}'
model = dict(
    backbone=dict(drop_path_rate=0.0, init_cfg=None),
    decode_head=dict(dropout_ratio=0.0, norm_cfg=dict(type='GN', num_groups=32, requires_grad=True)))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='Resize', scale=(96, 96), keep_ratio=False),
    dict(type='PackSegInputs'),
]
train_dataloader = dict(batch_size={batch}, dataset=dict(pipeline=train_pipeline))
max_iters = {iters}
param_scheduler = [dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=max_iters, by_epoch=False)]
train_cfg = dict(max_iters=max_iters, val_interval=1000)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval={ckpt}))
log_processor = dict(window_size=1)
log_level = '{log_level}'
"""
LOSS = re.compile(r'Iter\(train\) \[\s*(\d+)/\d+\].*?\sloss: ([\d.]+)')


def free_port() -> str:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return str(s.getsockname()[1])


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'}  # loads stay weights-only
    return {**env, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1', 'PORT': free_port()}  # PORT: dist_*.sh


def run(cmd: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f'{" ".join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}'
    return proc.stdout + proc.stderr


def losses(log_text: str) -> dict[int, float]:
    return {int(i): float(v) for i, v in LOSS.findall(log_text)}


def metrics(work_dir: Path) -> dict[str, float]:
    (path, ) = [p for p in work_dir.glob('*/*.json') if p.stem == p.parent.name]
    return json.loads(path.read_text())


def deterministic_config(tmp: Path, name: str, batch: int, iters: int, ckpt: int, log_level: str = 'INFO') -> Path:
    path = tmp / f'{name}.py'
    path.write_text(DETERMINISTIC.format(base=SEG_DEMO, batch=batch, iters=iters, ckpt=ckpt, log_level=log_level))
    return path


@pytest.fixture(scope='module')
def workspace(tmp_path_factory) -> Path:
    """A working directory holding the demo's synthetic ADE20K at the path its config reads."""
    cwd = tmp_path_factory.mktemp('downstream')
    generate('ade20k', cwd / 'data' / 'synthetic', **DATA)
    return cwd


@pytest.fixture(scope='module')
def trained(workspace) -> Path:
    """The demo segmentation config trained with ``mim train mmseg`` (shorter) and tested with ``mim test``."""
    work = workspace / 'work_dirs' / 'fpn'
    run([MIM, 'train', 'mmseg', str(SEG_DEMO), '--work-dir', str(work), '--cfg-options',
         'model.backbone.init_cfg=None',  # from scratch here: the demo's pretraining is tools/demo.py's
         f'train_cfg.max_iters={TRAIN_ITERS}', f'train_cfg.val_interval={TRAIN_ITERS}',
         f'param_scheduler.0.end={TRAIN_ITERS}', f'default_hooks.checkpoint.interval={TRAIN_ITERS}'], workspace)
    checkpoint = work / f'iter_{TRAIN_ITERS}.pth'
    assert (work / 'last_checkpoint').read_text().strip() == str(checkpoint)
    run([MIM, 'test', 'mmseg', str(SEG_DEMO), '--checkpoint', str(checkpoint), '--work-dir', str(work / 'test')],
        workspace)
    return work


def majority_metric(data_root: Path) -> dict[str, float]:
    """mmseg's ``IoUMetric`` on predicting the most frequent training class at every pixel."""
    from mmseg.evaluation import IoUMetric
    from PIL import Image
    ann = data_root / 'annotations'
    counts = sum(np.bincount(np.asarray(Image.open(p)).ravel(), minlength=256)
                 for p in (ann / 'training').glob('*.png'))
    majority = int(np.argmax(counts[1:]))  # ids 1..150 -> training labels 0..149 (reduce_zero_label)
    metric = IoUMetric(iou_metrics=['mIoU'])
    metric.dataset_meta = dict(classes=[str(i) for i in range(150)])
    for path in sorted((ann / 'validation').glob('*.png')):
        label = torch.from_numpy(np.asarray(Image.open(path)).astype(np.int64)) - 1
        label[label < 0] = 255
        sample = dict(pred_sem_seg=dict(data=torch.full((1, *label.shape), majority)),
                      gt_sem_seg=dict(data=label[None]))
        metric.process([], [sample])
    return metric.compute_metrics(metric.results)


@pytest.mark.slow
def test_demo_baseline_is_mmseg_iou_metric_of_the_majority_class_prediction(workspace):
    root = workspace / 'data/synthetic/ade/ADEChallengeData2016'
    expected = majority_metric(root)
    assert segmentation_baseline(root) == pytest.approx({k: expected[k] for k in ('mIoU', 'mAcc')}, abs=0.01)


@pytest.mark.slow
def test_short_cpu_training_learns_far_beyond_the_majority_class(trained, workspace):
    result = metrics(trained / 'test')
    baseline = majority_metric(workspace / 'data/synthetic/ade/ADEChallengeData2016')
    assert result['mIoU'] > 2 * baseline['mIoU'] and result['mIoU'] > baseline['mIoU'] + 15
    assert result['mAcc'] > 2 * baseline['mAcc']


@pytest.mark.slow
def test_two_process_test_reports_the_single_process_metrics(trained, workspace):
    checkpoint = trained / f'iter_{TRAIN_ITERS}.pth'
    text = run(['bash', str(ROOT / 'tools/dist_test.sh'), str(SEG_DEMO), str(checkpoint), '2',
                '--work-dir', str(trained / 'dist_test')], workspace)
    # Read from the log: MMEngine 0.10.7 dumps the metrics JSON from every rank into the same file.
    (line, ) = [line for line in text.splitlines() if 'Iter(test)' in line and 'mIoU:' in line]
    dist = {k: float(v) for k, v in re.findall(r'\b(mIoU|mAcc): ([\d.]+)', line)}
    single = metrics(trained / 'test')
    assert dist['mIoU'] == pytest.approx(single['mIoU'], abs=1e-4)
    assert dist['mAcc'] == pytest.approx(single['mAcc'], abs=1e-4)


@pytest.mark.slow
def test_two_processes_train_like_one_process_with_the_same_total_batch(workspace):
    iters = 6
    one = deterministic_config(workspace, 'one_process', batch=4, iters=iters, ckpt=iters)
    two = deterministic_config(workspace, 'two_processes', batch=2, iters=iters, ckpt=iters, log_level='DEBUG')
    single = losses(run([sys.executable, str(ROOT / 'tools/train.py'), str(one),
                         '--work-dir', str(workspace / 'work_dirs/one')], workspace))
    run(['bash', str(ROOT / 'tools/dist_train.sh'), str(two), '2', '--work-dir', str(workspace / 'work_dirs/two')],
        workspace)
    # Each rank logs the loss of its own 2 images; with equal-size images the 4-image loss is their mean.
    rank_logs = [next((workspace / 'work_dirs/two').glob(f'*/*rank{r}.log')).read_text() for r in (0, 1)]
    ranks = [losses(text) for text in rank_logs]
    assert sorted(single) == sorted(ranks[0]) == sorted(ranks[1]) == list(range(1, iters + 1))
    for i in single:
        assert (ranks[0][i] + ranks[1][i]) / 2 == pytest.approx(single[i], abs=2e-3), f'iteration {i}'
    assert any(abs(ranks[0][i] - ranks[1][i]) > 0.01 for i in single), 'the ranks must see different images'


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint_at_the_same_iteration(workspace):
    config = deterministic_config(workspace, 'resumable', batch=4, iters=12, ckpt=4)
    work = workspace / 'work_dirs/resumable'
    train = [sys.executable, str(ROOT / 'tools/train.py'), str(config), '--work-dir', str(work)]
    log = workspace / 'killed.log'
    with open(log, 'w') as out:
        proc = subprocess.Popen(train, cwd=workspace, env=environment(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while 5 not in losses(log.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # no chance to clean up, as a crash or a pre-empted job
        proc.wait()
    killed = losses(log.read_text())
    assert proc.returncode == -signal.SIGKILL and 5 in killed and 8 not in killed, killed
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_4.pth')

    resumed_text = run([*train, '--resume'], workspace)
    resumed = losses(resumed_text)
    assert 'resumed epoch: 0, iter: 4' in resumed_text
    assert min(resumed) == 5 and max(resumed) == 12
    assert resumed[5] == pytest.approx(killed[5], abs=2e-4)  # same weights, optimiser state and data
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_12.pth')
