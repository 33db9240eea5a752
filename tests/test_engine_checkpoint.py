"""A kill at any point of a checkpoint save loses nothing; ``--resume`` takes the newest intact checkpoint.

``tools/train.py`` trains the toy of ``engine_toy`` (a config without any hook
of ours: the tool adds them) and ``engine_stall`` stalls it at one point of the
save of ``iter_4.pth``, where it gets SIGKILL, as a crash or a pre-empted job
would. Afterwards ``last_checkpoint`` must name a complete checkpoint and
``--resume`` must finish the run. The reference for "complete" is
``torch.load`` of the file. Last, ``configs/_base_/safe_runtime.py`` (which lists
the hooks) combines with every demo config as a second base and its hooks build.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import engine_toy
import pytest
import torch
from mmengine.config import Config

from projects.lisa.engine.resume import checkpoint_problem, find_resumable_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent



def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'}
    return {**env, 'PYTHONPATH': f'{ROOT}{os.pathsep}{TESTS}', 'OMP_NUM_THREADS': '1', **extra}


def toy_config_file(tmp_path: Path, **kwargs) -> Path:
    path = tmp_path / 'toy.py'
    Config(engine_toy.toy_config(str(tmp_path / 'work'), safe=False, **kwargs)).dump(str(path))
    return path


def train(config: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / 'tools/train.py'), str(config), *args], cwd=config.parent,
                          env=environment(), capture_output=True, text=True, timeout=timeout)


def descendants(pid: int) -> list[int]:
    """The processes started by ``pid``, and by those, ... (torchrun's workers run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            ppid = int(stat.read_text().rsplit(')', 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def kill_at(config: Path, point: str, target: str, *args: str, command: list[str] | None = None) -> str:
    """Run training until it stalls at ``point`` / ``target``, SIGKILL it (its whole process group and every
    process it started, as a crash or a pre-empted job ends them all); the output."""
    log = config.parent / f'killed-{point}.log'
    command = command or [sys.executable, str(TESTS / 'engine_stall.py')]
    with open(log, 'w') as out:
        proc = subprocess.Popen([*command, str(config), *args], cwd=config.parent, stdout=out, stderr=subprocess.STDOUT,
                                env=environment(STALL_POINT=point, STALL_TARGET=target), start_new_session=True)
        deadline = time.monotonic() + 300
        while 'STALLED' not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        stalled = 'STALLED' in log.read_text()
        if proc.poll() is None:
            doomed = descendants(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
            for pid in doomed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        proc.wait()
    assert stalled, f'never reached {point} {target}:\n{log.read_text()[-3000:]}'
    return log.read_text()


def resumed_iteration(text: str) -> int:
    (found, ) = re.findall(r'resumed epoch: \d+, iter: (\d+)', text)
    return int(found)


@pytest.mark.slow  # each kill case starts two Python processes that import the mm libraries
@pytest.mark.parametrize('point, target, resumes_at', [
    ('write', 'iter_4.pth', 2),              # the new checkpoint is half written
    ('rename', 'iter_4.pth', 2),             # complete, under its temporary name
    ('published', 'iter_4.pth', 4),          # renamed and named by last_checkpoint, the old one not yet removed
    ('remove', 'iter_2.pth', 4),             # the old checkpoint is being removed
])
def test_kill_during_a_save_with_max_keep_ckpts_1_loses_nothing(tmp_path, point, target, resumes_at):
    config = toy_config_file(tmp_path, max_iters=8, interval=2, max_keep_ckpts=1)
    work = tmp_path / 'work'
    kill_at(config, point, target)
    pointed = (work / 'last_checkpoint').read_text().strip()
    assert checkpoint_problem(pointed) is None, f'last_checkpoint names {pointed}: {checkpoint_problem(pointed)}'

    proc = train(config, '--resume')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert resumed_iteration(proc.stdout + proc.stderr) == resumes_at
    assert sorted(p.name for p in work.iterdir() if p.suffix in ('.pth', '.tmp')) == ['iter_8.pth']
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'iter_8.pth')


@pytest.mark.slow
def test_resume_skips_a_truncated_newest_checkpoint_and_says_why(tmp_path):
    config = toy_config_file(tmp_path, max_iters=4, interval=2)
    work = tmp_path / 'work'
    assert train(config).returncode == 0
    newest = work / 'iter_4.pth'
    newest.write_bytes(newest.read_bytes()[:newest.stat().st_size // 3])  # e.g. a disk that filled up
    assert find_resumable_checkpoint(str(work))[0] == str(work / 'iter_2.pth')

    proc = train(config, '--resume', '--accept-changes', '--cfg-options', 'train_cfg.max_iters=6')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f'--resume: skipping {newest}: unreadable' in proc.stderr
    assert 'train_cfg.max_iters: 4 -> 6' in proc.stdout + proc.stderr  # a longer run is a listed change
    assert resumed_iteration(proc.stdout + proc.stderr) == 2
    assert torch.load(work / 'iter_6.pth', weights_only=True)['meta']['iter'] == 6


@pytest.mark.slow
def test_resume_refuses_when_no_checkpoint_is_intact(tmp_path):
    config = toy_config_file(tmp_path, max_iters=2, interval=2)
    work = tmp_path / 'work'
    assert train(config).returncode == 0
    (work / 'iter_2.pth').write_bytes(b'PK\x03\x04 truncated')
    proc = train(config, '--resume')
    assert proc.returncode != 0
    assert 'can be resumed from (1 found, see above)' in proc.stderr and 'unreadable' in proc.stderr


TRAINABLE = sorted(p for p in (ROOT / 'configs').rglob('*.py') if '_base_' not in p.parts)


@pytest.mark.parametrize('config', TRAINABLE, ids=lambda p: p.name)
def test_every_config_inherits_the_safe_runtime_and_its_hooks_build(config):
    # so `mim train` (the libraries' own train.py) runs with them too: through configs/_base_/lisa_runtime.py
    from mmengine.registry import HOOKS

    from projects.lisa.engine.nonfinite import NonFiniteGuardHook
    from projects.lisa.engine.runtime_config import add_safe_runtime
    from projects.lisa.engine.runtime_hook import SafeRuntimeHook
    cfg = Config.fromfile(str(config))
    hooks = [HOOKS.build(h) for h in cfg.custom_hooks]
    assert [type(h) for h in hooks] == [SafeRuntimeHook, NonFiniteGuardHook]
    add_safe_runtime(cfg)  # what tools/train.py does: nothing to add here
    assert len(cfg.custom_hooks) == 2


