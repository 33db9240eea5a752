"""Kill + ``--resume`` is the uninterrupted run, bit for bit.

The reference is the same config trained without interruption: the final
weights must be equal, not close. The demo's Semantic FPN + LiSA-PVT-T config
is used as it is (drop-path 0.1, dropout in the head, random resize / crop /
flip / photometric distortion), on tiny synthetic ADE20K, for one process and
for two gloo processes (``torchrun --nproc_per_node 2``). The toy of
``engine_toy`` checks the same in-process in seconds.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from projects.lisa.engine.resume import rng_state, set_rng_state

ROOT = Path(__file__).resolve().parents[1]
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'


class Crash(Exception):
    pass


class CrashBefore(Hook):
    def __init__(self, iteration: int) -> None:
        self.iteration = iteration

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        if runner.iter + 1 == self.iteration:
            raise Crash


def toy_run(work_dir: Path, name: str, resume: bool = False, crash_at: int | None = None) -> dict:
    cfg = engine_toy.toy_config(str(work_dir), max_iters=8, interval=3)
    runner = Runner.from_cfg(Config({**cfg, 'experiment_name': name, 'resume': resume}))
    if crash_at is not None:
        runner.register_hook(CrashBefore(crash_at))
        with pytest.raises(Crash):
            runner.train()
        return {}
    runner.train()
    return {k: v.clone() for k, v in runner.model.state_dict().items()}


def test_rng_state_round_trip_restores_every_generator():
    import random

    import numpy as np
    state = rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_toy_run_resumed_after_a_crash_ends_with_the_uninterrupted_weights(tmp_path):
    reference = toy_run(tmp_path / 'straight', 'straight')
    toy_run(tmp_path / 'crashed', 'crashed', crash_at=5)  # after the checkpoint of iteration 3
    resumed = toy_run(tmp_path / 'crashed', 'resumed', resume=True)
    assert reference.keys() == resumed.keys()
    assert all(torch.equal(reference[k], resumed[k]) for k in reference), 'resumed weights differ'


# the demo config through tools/train.py, one process and two gloo processes ---------------------------------------

ITERS = ['train_cfg.max_iters=6', 'param_scheduler.0.end=6', 'train_cfg.val_interval=100',
         'default_hooks.checkpoint.interval=2']


@pytest.fixture(scope='module')
def seg_workspace(tmp_path_factory) -> Path:
    from test_downstream_training import DATA

    from projects.lisa.synthetic import generate
    cwd = tmp_path_factory.mktemp('resume')
    generate('ade20k', cwd / 'data' / 'synthetic', **{**DATA, 'num_train': 12, 'num_val': 2})
    return cwd


def final_weights(work: Path) -> dict[str, torch.Tensor]:
    return torch.load(work / 'iter_6.pth', weights_only=True)['state_dict']


@pytest.mark.slow
@pytest.mark.parametrize('processes', [1, 2])
def test_killed_and_resumed_demo_run_ends_bitwise_equal_to_the_uninterrupted_run(seg_workspace, processes):
    from test_downstream_training import environment
    from test_engine_checkpoint import kill_at
    launch = ([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_port',
               environment()['PORT']] if processes == 2 else [sys.executable])
    extra = ['--launcher', 'pytorch'] if processes == 2 else []
    options = ['--cfg-options', engine_toy.FROM_SCRATCH, *ITERS, f'train_dataloader.batch_size={4 // processes}']
    straight, killed = seg_workspace / f'straight{processes}', seg_workspace / f'killed{processes}'
    proc = subprocess.run([*launch, str(ROOT / 'tools/train.py'), str(SEG_DEMO), '--work-dir', str(straight),
                           *extra, *options], cwd=seg_workspace, env=environment(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]

    config = seg_workspace / SEG_DEMO.name
    config.write_text(f"_base_ = '{SEG_DEMO}'\n")
    stall = [*launch, str(ROOT / 'tests/engine_stall.py')]
    kill_at(config, 'iteration', '5', '--work-dir', str(killed), *extra, *options, command=stall)
    assert (killed / 'last_checkpoint').read_text().strip() == str(killed / 'iter_4.pth')
    proc = subprocess.run([*launch, str(ROOT / 'tools/train.py'), str(config), '--work-dir', str(killed), '--resume',
                           *extra, *options], cwd=seg_workspace, env=environment(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'resumed epoch: 0, iter: 4' in proc.stdout + proc.stderr

    reference, resumed = final_weights(straight), final_weights(killed)
    different = [k for k in reference if not torch.equal(reference[k], resumed[k])]
    assert not different, f'{len(different)} of {len(reference)} tensors differ, e.g. {different[:3]}'
