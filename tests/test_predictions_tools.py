"""``tools/test.py --show-dir / --out`` and ``tools/image_demo.py`` on the detection and classification
demo configs (the segmentation ones run in ``test_readme_commands.py``).

Models are randomly initialised (what is checked is where the drawings and predictions go, not
their quality). References: the generated splits (one drawing and one dumped prediction per test
image, drawings at the image's size or twice its width), the libraries' own result types, and
``check_state_dict`` (a checkpoint of another model is refused by name).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from PIL import Image

from projects.lisa.registry import register_all_modules
from projects.lisa.synthetic import generate
from tools import demo

ROOT = Path(__file__).resolve().parents[1]
CASES = {  # config, its data, the test split's image folder under the data root, task
    'detection': (demo.DET_CONFIG, demo.DET_DATA, 'coco/val2017'),
    'classification': (demo.CLS_CONFIG, demo.CLS_DATA, 'imagenet/val'),
}


def random_checkpoint(config: str, path: Path) -> Path:
    """A checkpoint of the config's model, randomly initialised (no ``meta``: classes from the config)."""
    register_all_modules()
    cfg = Config.fromfile(str(ROOT / config))
    init_default_scope(cfg.default_scope)
    cfg.model.backbone.init_cfg = None
    from mmengine.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    torch.save({'state_dict': model.state_dict()}, path)
    return path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize('task', list(CASES))
def test_show_dir_draws_every_test_image_and_out_keeps_every_prediction(tmp_path, task):
    config, data, images = CASES[task]
    generate(data['dataset'], tmp_path / 'data' / 'synthetic', **{k: v for k, v in data.items() if k != 'dataset'})
    ckpt = random_checkpoint(config, tmp_path / 'model.pth')
    proc = run([str(ROOT / 'tools/test.py'), str(ROOT / config), str(ckpt), '--work-dir', 'work',
                '--show-dir', 'show', '--out', 'pred.pkl'], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted((tmp_path / 'data' / 'synthetic' / images).rglob('*.[jJ]*'))
    drawn = sorted((tmp_path / 'show').rglob('*.*'))
    assert len(files) == data['num_val'] and len(drawn) == len(files)
    predictions = pickle.loads((tmp_path / 'pred.pkl').read_bytes())
    assert len(predictions) == len(files)
    assert all(('pred_instances' if task == 'detection' else 'pred_label') in p for p in predictions)

    image = files[0]
    proc = run([str(ROOT / 'tools/image_demo.py'), str(ROOT / config), str(ckpt), str(image), '--out', 'one.png'],
               tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith('one.png: ')
    assert np.asarray(Image.open(tmp_path / 'one.png')).shape[:2] >= np.asarray(Image.open(image)).shape[:2]


@pytest.mark.slow
def test_image_demo_refuses_a_checkpoint_of_another_model_by_name(tmp_path):
    other = random_checkpoint(demo.CLS_CONFIG, tmp_path / 'classifier.pth')
    generate('coco', tmp_path / 'data', num_train=1, num_val=1, size=32, seed=0)
    (image, ) = (tmp_path / 'data' / 'coco' / 'val2017').glob('*.jpg')
    proc = run([str(ROOT / 'tools/image_demo.py'), str(ROOT / demo.DET_CONFIG), str(other), str(image),
                '--out', 'x.png'], tmp_path)
    assert proc.returncode == 1 and 'NOT IN THE CHECKPOINT' in proc.stderr and not (tmp_path / 'x.png').exists()
    proc = run([str(ROOT / 'tools/image_demo.py'), str(ROOT / demo.DET_CONFIG), str(other), 'missing.jpg',
                '--out', 'x.png'], tmp_path)
    assert proc.returncode == 2 and "image 'missing.jpg' does not exist" in proc.stderr
