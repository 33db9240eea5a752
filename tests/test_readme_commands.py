"""The README's "Get started" block, run as a user types it (slow: a few minutes).

The block follows ``make demo``; the test lays out what the demo leaves there (the generated ADE20K
and a classifier checkpoint at the dense demo's ``pretrained`` path, here a randomly initialised
LiSA-PVT-T) and runs every line of the bash block in one shell, then the python block. One change
keeps it short: the training line runs 25 of the config's 150 iterations (one logging interval, through
``--cfg-options``), and its last checkpoint is copied to the name the next lines read. References:
the generated data itself (every validation image drawn, one label map kept per image at the
image's size), MMEngine's ``scalars.json`` (the curves' points) and the images on disk.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from projects.lisa.synthetic import generate
from tools import demo

ROOT = Path(__file__).resolve().parents[1]
VAL = 'data/synthetic/ade/ADEChallengeData2016/images/validation'


def get_started() -> tuple[str, str]:
    """The bash and the python block of the README's "Get started" section."""
    section = (ROOT / 'README.md').read_text().split('\n## Get started\n', 1)[1].split('\n## ', 1)[0]
    (bash, ) = re.findall(r'```bash\n(.*?)```', section, re.S)[:1]
    (python, ) = re.findall(r'```python\n(.*?)```', section, re.S)
    return bash, python


def demo_leftovers(cwd: Path) -> None:
    """What ``make demo`` leaves that the block reads: the generated ADE20K, the classifier checkpoint."""
    generate('ade20k', cwd / 'data' / 'synthetic', **{k: v for k, v in demo.SEG_DATA.items() if k != 'dataset'})
    from projects.lisa.models.backbones import LiSAPVT
    backbone = LiSAPVT(arch='tiny', pretrain_img_size=64)
    path = cwd / demo.dense_pretrained()
    path.parent.mkdir(parents=True)
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in backbone.state_dict().items()}, 'meta': {}}, path)


@pytest.mark.slow
def test_get_started_block_runs_as_written(tmp_path):
    bash, python = get_started()
    demo_leftovers(tmp_path)
    (tmp_path / '.venv' / 'bin').mkdir(parents=True)
    (tmp_path / '.venv' / 'bin' / 'activate').write_text(f'export PATH={Path(sys.executable).parent}:$PATH\n')
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    script = 'set -euo pipefail\n' + bash.replace('python tools/', f'python {ROOT}/tools/')
    script = script.replace('CFG=configs/', f'CFG={ROOT}/configs/')
    train = re.search(r'^python \S+/tools/train.py .*?--work-dir (\S+)', script, re.M)
    short = ('--cfg-options train_cfg.max_iters=25 train_cfg.val_interval=25 param_scheduler.0.end=25 '
             f'default_hooks.checkpoint.interval=25 && cp {train[1]}/iter_25.pth {train[1]}/iter_150.pth')
    script = script.replace(train[0], f'{train[0]} {short}')
    proc = subprocess.run(['bash', '-c', script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    work = tmp_path / 'work_dirs' / 'fpn_demo'
    images = sorted((tmp_path / VAL).glob('*.jpg'))
    drawn = sorted((work / 'show').rglob('*.png'))
    assert len(drawn) == len(images) == demo.SEG_DATA['num_val']
    for image in images:  # --show-dir: ground truth beside prediction, at the image's size
        (path, ) = [p for p in drawn if image.stem in p.name]
        h, w = np.asarray(Image.open(image)).shape[:2]
        assert np.asarray(Image.open(path)).shape[:2] == (h, 2 * w)
        label = np.asarray(Image.open(work / 'pred' / f'{image.stem}.png'))  # --out: one label map per image,
        assert label.shape == (h, w) and 1 <= label.min() and label.max() <= 150  # in ADE20K's ids (1-150)
    assert len(list((tmp_path / 'show').rglob('*.png'))) == len(images)  # mim test --show-dir draws them all too
    first = np.asarray(Image.open(tmp_path / VAL / 'ADE_val_00000001.jpg'))
    prediction = np.asarray(Image.open(work / 'prediction.png'))
    assert prediction.shape == first.shape and not np.array_equal(prediction, first)  # drawn over the image
    assert (work / 'curves.png').stat().st_size > 0 and list((work / 'browse').glob('*.png'))

    code = python.replace("'configs/", f"'{ROOT}/configs/")
    proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list((tmp_path / 'work_dirs' / 'fpn_demo' / 'inferencer').rglob('*.png'))
