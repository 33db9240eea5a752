"""A full disk stops a save cleanly.

The free space is simulated (``shutil.disk_usage`` as the hook sees it) and so is a write
that fails half-way; no disk is filled. What must hold: the hook refuses a save that
cannot fit, with the bytes and the ``max_keep_ckpts`` advice, before touching the kept
checkpoint, and before the first save too (estimated from the model's and optimizer's
tensors); a write that fills the disk says the same; a failed write leaves no partial
file; a stale ``.tmp`` is removed at start.
"""
from __future__ import annotations

import errno
import os.path as osp
from collections import namedtuple

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

import projects.lisa.registry  # noqa: F401  (registers the hooks)
from projects.lisa.engine import checkpoint_hook
from projects.lisa.engine.checkpoint import NoSpaceForCheckpointError, remove_partial_saves

Usage = namedtuple('Usage', 'total used free')


def toy_runner(work_dir) -> Runner:
    return Runner.from_cfg(Config(engine_toy.toy_config(str(work_dir), max_iters=4, interval=2, max_keep_ckpts=1)))


def test_save_without_room_for_the_new_checkpoint_stops_with_the_bytes_and_keeps_the_old(tmp_path, monkeypatch):
    first = tmp_path / 'iter_2.pth'

    def usage(path):  # room for the first checkpoint, then for half of one
        return Usage(1, 1, first.stat().st_size // 2 if first.exists() else 10 ** 12)
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', usage)
    with pytest.raises(NoSpaceForCheckpointError) as error:
        toy_runner(tmp_path).train()
    size = first.stat().st_size
    needed = int(size * 1.05) + (1 << 20)  # the previous checkpoint + 5 % + 1 MiB
    assert f'not saving iter_4.pth: {size // 2} bytes free in {tmp_path}, it needs about {needed}' in str(error.value)
    assert 'max_keep_ckpts + 1 = 2 checkpoints' in str(error.value)
    assert torch.load(first, weights_only=False)['meta']['iter'] == 2
    assert (tmp_path / 'last_checkpoint').read_text().endswith('iter_2.pth')
    assert not list(tmp_path.glob('*.tmp')) and not (tmp_path / 'iter_4.pth').exists()


def test_a_save_that_fails_half_way_removes_its_partial_file(tmp_path, monkeypatch):
    import mmengine.runner.runner as mm_runner
    real_save = mm_runner.save_checkpoint

    def half_then_full(checkpoint, filename, **kwargs):
        if osp.basename(filename).startswith('iter_4.pth.'):
            with open(filename, 'wb') as f:
                f.write(b'\0' * 1000)
            raise OSError(errno.ENOSPC, 'No space left on device')
        return real_save(checkpoint, filename, **kwargs)
    monkeypatch.setattr(mm_runner, 'save_checkpoint', half_then_full)
    with pytest.raises(NoSpaceForCheckpointError, match=r'No space left.* \(the previous checkpoint took \d+ bytes'):
        toy_runner(tmp_path).train()
    assert not list(tmp_path.glob('*.tmp'))
    assert torch.load(tmp_path / 'iter_2.pth', weights_only=False)['meta']['iter'] == 2
    assert (tmp_path / 'last_checkpoint').read_text().endswith('iter_2.pth')


def state_bytes(runner) -> int:
    """The bytes of the model's and the optimizer's tensors, from which a first checkpoint's size is estimated."""
    tensors = [*runner.model.state_dict().values(),
               *(v for state in runner.optim_wrapper.state_dict()['state'].values() for v in state.values())]
    return sum(t.nbytes for t in tensors)


def first_save_bytes(runner) -> int:
    """The model's tensors and the state AdamW's first step creates: two moments of each parameter, in its
    dtype, and a float32 step count."""
    params = list(runner.model.parameters())
    return sum(t.nbytes for t in runner.model.state_dict().values()) + sum(2 * p.nbytes + 4 for p in params)


def test_a_run_without_room_for_its_first_checkpoint_stops_at_start(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', lambda path: Usage(1, 1, 1000))
    runner = toy_runner(tmp_path)
    with pytest.raises(NoSpaceForCheckpointError) as error:
        runner.train()
    assert runner.iter == 0 and not list(tmp_path.glob('*.pth*'))  # before training, nothing written
    needed = int(first_save_bytes(runner) * 1.05) + (1 << 20)
    assert f'not saving the first checkpoint: 1000 bytes free in {tmp_path}, it needs about {needed}' in str(
        error.value)


def test_the_check_at_start_counts_the_optimizer_state_of_the_first_step(tmp_path, monkeypatch):
    """Room for the model's tensors but not for AdamW's moments: the run stops before training, not at
    its first save an interval later."""
    runner = toy_runner(tmp_path)
    model_only = int(sum(v.nbytes for v in runner.model.state_dict().values()) * 1.05) + (1 << 20)
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', lambda path: Usage(1, 1, model_only))
    with pytest.raises(NoSpaceForCheckpointError) as error:
        runner.train()
    assert runner.iter == 0
    needed = int(first_save_bytes(runner) * 1.05) + (1 << 20)
    assert f'not saving the first checkpoint: {model_only} bytes free in {tmp_path}, it needs about {needed}' in \
        str(error.value)


def test_the_first_save_is_checked_with_the_optimizer_state_it_holds(tmp_path, monkeypatch):
    runner = toy_runner(tmp_path)
    free = int(sum(v.nbytes for v in runner.model.state_dict().values()) * 1.05) + (1 << 20)  # the model's only
    # room at start (that check: test_the_check_at_start_counts_the_optimizer_state_of_the_first_step)
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', lambda path: Usage(1, 1, 10 ** 12 if runner.iter == 0
                                                                                 else free))
    with pytest.raises(NoSpaceForCheckpointError) as error:
        runner.train()
    needed = int(state_bytes(runner) * 1.05) + (1 << 20)  # AdamW's moments now included
    assert needed > free
    assert f'not saving iter_2.pth: {free} bytes free in {tmp_path}, it needs about {needed}' in str(error.value)
    assert not list(tmp_path.glob('*.pth*'))


def test_a_full_disk_during_the_first_save_says_the_bytes_and_the_path(tmp_path, monkeypatch):
    import mmengine.runner.runner as mm_runner
    free = [10 ** 12]

    def full(checkpoint, filename, **kwargs):
        with open(filename, 'wb') as f:
            f.write(b'\0' * 1000)
        free[0] = 500
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(mm_runner, 'save_checkpoint', full)
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', lambda path: Usage(1, 1, free[0]))
    runner = toy_runner(tmp_path)
    with pytest.raises(NoSpaceForCheckpointError) as error:
        runner.train()
    needed = int(state_bytes(runner) * 1.05) + (1 << 20)
    assert (f'not saving iter_2.pth: the disk filled up during the save ([Errno 28] No space left on device): '
            f'500 bytes free in {tmp_path}, it needs about {needed}') in str(error.value)
    assert not list(tmp_path.glob('*.tmp'))


class Crash(Exception):
    pass


class CrashAfter(Hook):
    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        if runner.iter + 1 == 4:  # after the save of iter_4.pth
            raise Crash


def test_a_resume_without_room_for_the_next_checkpoint_stops_at_start(tmp_path, monkeypatch):
    cfg = engine_toy.toy_config(str(tmp_path), max_iters=8, interval=2, max_keep_ckpts=1)
    runner = Runner.from_cfg(Config(cfg))
    runner.register_hook(CrashAfter(), priority='LOWEST')
    with pytest.raises(Crash):
        runner.train()
    size = (tmp_path / 'iter_4.pth').stat().st_size
    monkeypatch.setattr(checkpoint_hook.shutil, 'disk_usage', lambda path: Usage(1, 1, size))
    runner = Runner.from_cfg(Config({**cfg, 'resume': True, 'load_from': str(tmp_path / 'iter_4.pth')}))
    with pytest.raises(NoSpaceForCheckpointError, match=rf'{size} bytes free'):
        runner.train()
    assert runner.iter == 4  # stopped before training on


def test_stale_partial_saves_are_removed_and_nothing_else(tmp_path):
    (tmp_path / 'iter_6.pth.tmp').write_bytes(b'\0' * 10)
    (tmp_path / 'iter_4.pth').write_bytes(b'ok')
    removed = []
    remove_partial_saves(str(tmp_path), removed.append)
    assert [p.name for p in tmp_path.iterdir()] == ['iter_4.pth'] and 'iter_6.pth.tmp' in removed[0]
