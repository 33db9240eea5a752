"""One training run per work dir: a second run stops at start naming the first; a dead run's lock does not block.

The lock's rules are checked on lock files written by hand for processes whose state the test
controls (a ``sleep`` it started: alive; one that has exited: dead; a live pid with another start
time: a reused pid; another host). Then two real ``tools/train.py`` processes on the toy of
``engine_toy`` start at the same moment in one work dir, and a ``mim train``-style run (the
Runner with the config's hooks) meets a live lock.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config
from mmengine.runner import Runner
from test_engine_checkpoint import environment, toy_config_file

import projects.lisa.registry  # noqa: F401  (registers the hooks)
from projects.lisa.engine import checkpoint
from projects.lisa.engine.work_dir_lock import (
    LOCK_NAME,
    LockHolder,
    WorkDirLockedError,
    lock_work_dir,
    process_start,
    release_work_dir,
)

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(['sleep', '60'])
    yield proc
    proc.kill()
    proc.wait()


def write_lock(work_dir: Path, **fields) -> Path:
    """A lock file as another run writes it: this host and the fields given."""
    work_dir.mkdir(parents=True, exist_ok=True)
    holder = LockHolder(**{**dataclasses.asdict(LockHolder.this_process()), 'command': 'tools/train.py other.py',
                           **fields})
    path = work_dir / LOCK_NAME
    path.write_text(json.dumps(dataclasses.asdict(holder)))
    return path


def test_a_live_run_keeps_the_work_dir_and_the_error_names_it(tmp_path, sleeper):
    path = write_lock(tmp_path, pid=sleeper.pid, process_start=process_start(sleeper.pid))
    before = path.read_text()
    with pytest.raises(WorkDirLockedError) as error:
        lock_work_dir(str(tmp_path))
    message = str(error.value)
    for part in (f'process {sleeper.pid} on host {socket.gethostname()}', 'tools/train.py other.py',
                 json.loads(before)['started'], 'it is running', '--work-dir', f'delete {path}'):
        assert part in message
    assert path.read_text() == before  # untouched


def test_a_dead_runs_lock_is_replaced_and_said(tmp_path):
    dead = subprocess.Popen(['true'])
    dead.wait()
    write_lock(tmp_path, pid=dead.pid, process_start='gone:1')
    said = []
    lock_work_dir(str(tmp_path), said.append)
    assert json.loads((tmp_path / LOCK_NAME).read_text())['pid'] == os.getpid()
    assert f'replacing the lock of process {dead.pid}' in said[0] and 'no longer runs' in said[0]
    release_work_dir(str(tmp_path))
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_reused_pid_does_not_keep_the_lock(tmp_path, sleeper):
    """The recorded pid runs, but it is another process than the one that locked (it started at another time)."""
    write_lock(tmp_path, pid=sleeper.pid, process_start=process_start(sleeper.pid) + '0')
    lock_work_dir(str(tmp_path), lambda line: None)
    assert json.loads((tmp_path / LOCK_NAME).read_text())['pid'] == os.getpid()
    release_work_dir(str(tmp_path))


def test_a_lock_of_another_host_is_kept_and_the_error_says_why(tmp_path):
    path = write_lock(tmp_path, host='other-node', pid=os.getpid())
    with pytest.raises(WorkDirLockedError, match='cannot check whether a process of other-node still runs'):
        lock_work_dir(str(tmp_path))
    assert json.loads(path.read_text())['host'] == 'other-node'


def test_the_same_process_locks_again_and_releases_only_its_own_lock(tmp_path, sleeper):
    assert lock_work_dir(str(tmp_path)) == lock_work_dir(str(tmp_path)) == str(tmp_path / LOCK_NAME)
    release_work_dir(str(tmp_path))
    assert not (tmp_path / LOCK_NAME).exists()
    path = write_lock(tmp_path, pid=sleeper.pid, process_start=process_start(sleeper.pid))
    release_work_dir(str(tmp_path))  # not this process's
    assert path.exists()


def test_a_runner_training_in_a_locked_work_dir_stops_before_writing(tmp_path, sleeper):
    """The path of ``mim train``: the config's SafeRuntimeHook takes the lock; ``test()`` is not stopped."""
    write_lock(tmp_path, pid=sleeper.pid, process_start=process_start(sleeper.pid))
    with pytest.raises(WorkDirLockedError, match=f'process {sleeper.pid}'):
        Runner.from_cfg(Config(engine_toy.toy_config(str(tmp_path), max_iters=2, interval=1))).train()
    assert not list(tmp_path.glob('*.pth*')) and not (tmp_path / 'last_checkpoint').exists()
    cfg = engine_toy.toy_config(str(tmp_path), max_iters=2, interval=1)
    Runner.from_cfg(Config(cfg)).test()  # evaluating beside a training run stays possible


def test_temporary_files_are_the_runs_own(tmp_path, monkeypatch):
    import mmengine.runner.runner as mm_runner
    written = []
    real = mm_runner.save_checkpoint
    monkeypatch.setattr(mm_runner, 'save_checkpoint', lambda ckpt, filename, **kw: (written.append(filename),
                                                                                      real(ckpt, filename, **kw)))
    Runner.from_cfg(Config(engine_toy.toy_config(str(tmp_path), max_iters=1, interval=1))).train()
    assert written == [str(tmp_path / f'iter_1.pth{checkpoint.TMP_SUFFIX}')]
    assert f'.{os.getpid()}-' in checkpoint.TMP_SUFFIX
    assert not (tmp_path / LOCK_NAME).exists()  # released at the end of the run


@pytest.mark.slow  # two processes that import the mm libraries
def test_two_runs_started_together_one_trains_the_other_stops_naming_it(tmp_path):
    """Both start at once, with different seeds; each would stall at iteration 2 until released, so the
    first to lock still runs when the other checks. The other must exit 1 naming it, having written
    nothing; the first then finishes alone: one log folder, checkpoints of its seed only."""
    config = toy_config_file(tmp_path, max_iters=4, interval=2)
    work, release = tmp_path / 'work', tmp_path / 'release'
    procs = []
    for seed in (1, 2):
        log = open(tmp_path / f'run{seed}.log', 'w')
        procs.append((seed, log, subprocess.Popen(
            [sys.executable, str(TESTS / 'engine_stall.py'), str(config), '--cfg-options', f'randomness.seed={seed}'],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env=environment(STALL_POINT='iteration', STALL_TARGET='2', STALL_RELEASE=str(release)))))
    deadline = time.monotonic() + 240
    while sum(p.poll() is not None for _, _, p in procs) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    release.touch()
    for _, log, proc in procs:
        proc.wait(timeout=240)
        log.close()
    outputs = {seed: (tmp_path / f'run{seed}.log').read_text() for seed, _, _ in procs}
    codes = {seed: proc.returncode for seed, _, proc in procs}
    assert sorted(codes.values()) == [0, 1], (codes, outputs)
    winner, loser = sorted(codes, key=codes.get)
    winner_pid = next(p.pid for s, _, p in procs if s == winner)
    assert f'is in use by another training run: process {winner_pid} on host {socket.gethostname()}' in \
        outputs[loser]
    assert 'Traceback' not in outputs[loser] and 'STALLED' in outputs[winner]
    assert len([d for d in work.iterdir() if d.is_dir()]) == 1  # the winner's log folder only
    assert sorted(p.name for p in work.iterdir() if p.is_file()) == ['iter_2.pth', 'iter_4.pth', 'last_checkpoint',
                                                                     'toy.py']
    for name in ('iter_2.pth', 'iter_4.pth'):
        assert torch.load(work / name, weights_only=False)['meta']['seed'] == winner


def test_a_killed_process_not_yet_reaped_does_not_keep_the_lock(tmp_path):
    """A zombie keeps its pid and /proc entry until its parent reaps it (a killed torchrun's workers, where
    nothing reaps orphans): it runs no more."""
    zombie = subprocess.Popen(['sleep', '0.5'])
    identity = process_start(zombie.pid)  # while it runs
    deadline = time.monotonic() + 10
    while Path(f'/proc/{zombie.pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z':  # exited, not waited
        assert time.monotonic() < deadline
        time.sleep(0.01)
    write_lock(tmp_path, pid=zombie.pid, process_start=identity)
    assert process_start(zombie.pid) is None
    lock_work_dir(str(tmp_path), lambda line: None)
    assert json.loads((tmp_path / LOCK_NAME).read_text())['pid'] == os.getpid()
    release_work_dir(str(tmp_path))
    zombie.wait()
