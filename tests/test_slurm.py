"""``tools/slurm_train.sh`` / ``slurm_test.sh``: the srun line, and a run under it with ``--launcher slurm``.

Stand-ins for Slurm's ``srun`` and ``scontrol`` on the PATH record their arguments; ``srun`` then
runs its command as one task would run, with the variables Slurm sets for task 0 of 1
(``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_NODELIST``, ``SLURM_LOCALID``). The reference for the
srun line is Slurm's own option syntax, written out here; for the run, the checkpoint the toy of
``engine_toy`` saves and the metric ``tools/test.py`` logs for it.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

SRUN = '''#!/usr/bin/env bash
printf '%s\\n' "$@" > "$STAND_IN_LOG/srun.args"
printf '%s\\n' "$PYTHONPATH" > "$STAND_IN_LOG/srun.pythonpath"
[[ -n "${SRUN_RECORD_ONLY:-}" ]] && exit 0
while [[ $# -gt 0 ]]; do  # srun's own options: "-p PARTITION", "-x NODES", "--name=value"
    case $1 in -p|-x) shift 2 ;; -*) shift ;; *) break ;; esac
done
SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_LOCALID=0 SLURM_NODELIST='node[1-2]' exec "$@"
'''
SCONTROL = '''#!/usr/bin/env bash
printf '%s\\n' "$@" > "$STAND_IN_LOG/scontrol.args"
[[ "$1 $2" == "show hostname" ]] && printf '127.0.0.1\\nnode2\\n'
'''


@pytest.fixture
def slurm(tmp_path) -> dict[str, str]:
    """The environment with the stand-ins first on the PATH; they log into ``tmp_path / 'log'``."""
    bin_dir, log = tmp_path / 'bin', tmp_path / 'log'
    bin_dir.mkdir()
    log.mkdir()
    for name, text in (('srun', SRUN), ('scontrol', SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(('SLURM_', 'GPUS', 'CPUS_PER_TASK', 'SRUN_'))}
    return {**env, 'PATH': f'{bin_dir}{os.pathsep}{env["PATH"]}', 'STAND_IN_LOG': str(log), 'PYTHON': sys.executable,
            'PYTHONPATH': str(TESTS), 'OMP_NUM_THREADS': '1', 'MASTER_PORT': str(port)}


def script(name: str, *args: str, env: dict[str, str], cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(['bash', str(ROOT / 'tools' / name), *args], env={**env, **extra}, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def recorded(env: dict[str, str], name: str) -> list[str]:
    return (Path(env['STAND_IN_LOG']) / name).read_text().splitlines()


def test_srun_line_of_train_and_test(slurm, tmp_path):
    proc = script('slurm_train.sh', 'gpu', 'lisa', 'a.py', 'work', '--amp', env=slurm, cwd=tmp_path,
                  SRUN_RECORD_ONLY='1', GPUS='16', CPUS_PER_TASK='4', SRUN_ARGS='--quotatype=auto -x node3')
    assert proc.returncode == 0, proc.stderr
    assert recorded(slurm, 'srun.args') == [
        '-p', 'gpu', '--job-name=lisa', '--gres=gpu:8', '--ntasks=16', '--ntasks-per-node=8', '--cpus-per-task=4',
        '--kill-on-bad-exit=1', '--quotatype=auto', '-x', 'node3', sys.executable, '-u', str(ROOT / 'tools/train.py'),
        'a.py', '--work-dir', 'work', '--launcher', 'slurm', '--amp']
    assert recorded(slurm, 'srun.pythonpath') == [f'{ROOT}{os.pathsep}{TESTS}']  # the repository first

    proc = script('slurm_train.sh', 'gpu', 'lisa', 'a.py', '--resume', env=slurm, cwd=tmp_path, SRUN_RECORD_ONLY='1',
                  GPUS='2')  # no work dir: an option in its place goes to train.py
    assert proc.returncode == 0, proc.stderr
    assert recorded(slurm, 'srun.args')[:6] == ['-p', 'gpu', '--job-name=lisa', '--gres=gpu:2', '--ntasks=2',
                                                '--ntasks-per-node=2']
    assert recorded(slurm, 'srun.args')[-5:] == [str(ROOT / 'tools/train.py'), 'a.py', '--launcher', 'slurm',
                                                 '--resume']

    proc = script('slurm_test.sh', 'gpu', 'eval', 'a.py', 'a.pth', '--work-dir', 'w', env=slurm, cwd=tmp_path,
                  SRUN_RECORD_ONLY='1')
    assert proc.returncode == 0, proc.stderr
    assert recorded(slurm, 'srun.args') == [
        '-p', 'gpu', '--job-name=eval', '--gres=gpu:8', '--ntasks=8', '--ntasks-per-node=8', '--cpus-per-task=5',
        '--kill-on-bad-exit=1', sys.executable, '-u', str(ROOT / 'tools/test.py'), 'a.py', 'a.pth', '--launcher',
        'slurm', '--work-dir', 'w']


def test_bad_arguments_are_refused_before_srun(slurm, tmp_path):
    proc = script('slurm_train.sh', 'gpu', 'lisa', env=slurm, cwd=tmp_path)
    assert proc.returncode == 2 and 'usage: ' in proc.stderr and 'PARTITION JOB_NAME CONFIG' in proc.stderr
    proc = script('slurm_test.sh', 'gpu', 'lisa', 'a.py', env=slurm, cwd=tmp_path)
    assert proc.returncode == 2 and 'CONFIG CHECKPOINT' in proc.stderr
    proc = script('slurm_train.sh', 'gpu', 'lisa', 'a.py', env=slurm, cwd=tmp_path, GPUS='two')
    assert proc.returncode == 2 and 'GPUS=two: expected a positive whole number' in proc.stderr
    assert not (Path(slurm['STAND_IN_LOG']) / 'srun.args').exists()


@pytest.mark.slow  # two runs of the tools, each importing the mm libraries
def test_train_and_test_run_under_srun_with_the_slurm_launcher(slurm, tmp_path):
    import engine_toy
    from mmengine.config import Config

    config = tmp_path / 'toy.py'
    Config(engine_toy.toy_config(str(tmp_path / 'work'), max_iters=4, interval=4, safe=False)).dump(str(config))
    proc = script('slurm_train.sh', 'cpu', 'toy', str(config), str(tmp_path / 'work'), env=slurm, cwd=tmp_path,
                  GPUS='1')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert recorded(slurm, 'scontrol.args') == ['show', 'hostname', 'node[1-2]']  # the master: its first node
    assert (tmp_path / 'work' / 'iter_4.pth').is_file()
    assert 'Distributed launcher: slurm' in proc.stdout and 'Distributed training: True' in proc.stdout

    proc = script('slurm_test.sh', 'cpu', 'toy', str(config), str(tmp_path / 'work' / 'iter_4.pth'), '--work-dir',
                  str(tmp_path / 'test'), env=slurm, cwd=tmp_path, GPUS='1')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (result, ) = (tmp_path / 'test').glob('*/*.json')
    assert json.loads(result.read_text())['mse'] >= 0


def test_the_slurm_launcher_outside_srun_says_what_is_missing(monkeypatch):
    from projects.lisa.engine.dist import slurm_environment
    for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('SLURM_NTASKS', '2')
    with pytest.raises(RuntimeError, match='--launcher slurm without SLURM_PROCID, SLURM_NODELIST in the environment'):
        slurm_environment()
