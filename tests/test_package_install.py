"""The wheel works without the repo: ``pip wheel .`` installed non-editable trains from another folder.

Only this test catches a package that reads files the wheel lacks (a file of the repo's ``configs/``
instead of package data such as the safety hooks' config fragment) or misses package data. The wheel is
built from a copy of the tracked sources (no compiled kernels, no build folders of the checkout) and installed with
``--no-deps`` into a fresh venv that sees the project venv's packages through a plain path line (so the
editable install's finder, which would import the checkout, is not run): only the wheel is new.
It is built with ``LISA_WITH_KERNELS=0``: the three kernels' -O3 compile takes 410 of the test's 431 s,
and ``make install`` already compiles them from the same ``setup.py`` (and checks they import); the
package then runs the same math in tensor operations.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = ['mmseg::_base_/models/fpn_r50.py', 'mmseg::_base_/datasets/ade20k.py',
          'mmseg::_base_/default_runtime.py']
crop_size = (64, 64)
norm_cfg = dict(type='BN', requires_grad=True)
model = dict(
    data_preprocessor=dict(size=crop_size), pretrained=None,
    backbone=dict(_delete_=True, type='LiSAPVT', arch='tiny', pretrain_img_size=64, out_indices=(0, 1, 2, 3),
                  attn_cfgs=[dict(type='lisa', num_steps=2)] * 4),
    neck=dict(in_channels=[64, 128, 320, 512]),
    decode_head=dict(num_classes=150, norm_cfg=norm_cfg))
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomCrop', crop_size=crop_size), dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root='data/ade/ADEChallengeData2016', pipeline=train_pipeline))
val_dataloader = val_cfg = val_evaluator = test_dataloader = test_cfg = test_evaluator = None
optim_wrapper = dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=1e-4))
train_cfg = dict(type='IterBasedTrainLoop', max_iters=2, val_interval=100)
default_hooks = dict(
    timer=dict(type='IterTimerHook'), logger=dict(type='LoggerHook', interval=1, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'), sampler_seed=dict(type='DistSamplerSeedHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=2))
randomness = dict(seed=0)
"""

# Run in the fresh venv, in a folder outside the repo: records every file opened under the repo (an audit
# hook sees each open), adds the package's safety hooks as tools/train.py does, trains, then checks.
TRAIN = """
import sys
repo, venv = sys.argv[1] + '/', sys.argv[2] + '/'  # the project venv (packages it lends) may lie inside the repo
opened = []
sys.addaudithook(lambda event, args: event == 'open' and isinstance(args[0], str) and args[0].startswith(repo)
                 and not args[0].startswith(venv) and opened.append(args[0]))
from mmengine.config import Config
from mmengine.runner import Runner
import projects.lisa
from projects.lisa.engine.runtime_config import add_safe_runtime
assert not projects.lisa.__file__.startswith(repo), projects.lisa.__file__
cfg = Config.fromfile('fpn.py')
cfg.work_dir = 'work'
add_safe_runtime(cfg)
runner = Runner.from_cfg(cfg)
runner.train()
print('HOOKS', sorted(type(h).__name__ for h in runner.hooks))
print('OPENED', opened)
print('PACKAGE', projects.lisa.__file__)
"""


@pytest.mark.slow
def test_the_installed_wheel_trains_semantic_fpn_with_the_safety_hooks_from_outside_the_repo(tmp_path):
    src = tmp_path / 'src'
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        '.git', '.venv', 'build', 'data', 'work_dirs', 'pretrain', '*.so', '*.egg-info', '__pycache__', 'tests'))
    wheels = tmp_path / 'wheels'
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w', wheels,
                    src], check=True, env={**env, 'LISA_WITH_KERNELS': '0'}, cwd=tmp_path)
    wheel, = wheels.glob('lisa_mm-*.whl')

    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv], check=True, env=env)
    python = venv / 'bin' / 'python'
    subprocess.run([sys.executable, '-m', 'pip', '--python', python, 'install', '--no-deps', '-q', wheel],
                   check=True, env=env)
    site = Path(subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                               check=True, capture_output=True, text=True).stdout.strip())
    # A plain path line: the project venv's packages, without running its .pth files (the editable finder).
    (site / 'project_venv.pth').write_text(sysconfig.get_paths()['purelib'] + '\n')

    run = tmp_path / 'run'
    run.mkdir()
    from projects.lisa.synthetic import generate
    generate('ade20k', run / 'data', num_train=4, num_val=2, size=64)
    (run / 'fpn.py').write_text(textwrap.dedent(CONFIG))
    (run / 'train.py').write_text(textwrap.dedent(TRAIN))
    out = subprocess.run([python, 'train.py', str(ROOT), sys.prefix], cwd=run, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = {line.split(' ', 1)[0]: line.split(' ', 1)[1] for line in out.stdout.splitlines()
             if line.split(' ', 1)[0] in ('HOOKS', 'OPENED', 'PACKAGE')}
    assert lines['PACKAGE'].startswith(str(site)), lines['PACKAGE']
    assert lines['OPENED'] == '[]', lines['OPENED']
    for hook in ('SafeRuntimeHook', 'NonFiniteGuardHook', 'SafeCheckpointHook'):
        assert f"'{hook}'" in lines['HOOKS'], lines['HOOKS']
    assert (run / 'work' / 'iter_2.pth').is_file()
    assert not list((site / 'projects' / 'lisa').rglob('*.so'))


def test_a_kernel_switch_other_than_0_or_1_stops_the_build():
    out = subprocess.run([sys.executable, 'setup.py', '--name'], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, 'LISA_WITH_KERNELS': 'yes'})
    assert out.returncode != 0
    assert "LISA_WITH_KERNELS='yes'" in out.stderr and "'0'" in out.stderr, out.stderr
