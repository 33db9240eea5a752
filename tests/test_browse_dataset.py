"""``tools/browse_dataset.py``: the training pipeline's samples drawn with their annotations.

On the data of ``tools/generate_data.py`` with the demo configs (segmentation, detection,
classification). The references: the image the pipeline packed (which ``browse`` returns beside
the file it wrote) and its annotations, read off the data sample here: the PNG has the image's
size, the pixels the annotations cover (label map, instance masks) are drawn over, and the rest of
a segmentation image is left as it was where no label is.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mmengine.config import Config

ROOT = Path(__file__).resolve().parents[1]
DEMOS = {scope: next((ROOT / 'configs' / task / 'demo').glob('*.py'))
         for scope, task in (('mmseg', 'segmentation'), ('mmdet', 'detection'), ('mmpretrain', 'classification'))}


@pytest.fixture(scope='module')
def workspace(tmp_path_factory) -> Path:
    from projects.lisa.synthetic import generate
    cwd = tmp_path_factory.mktemp('browse')
    for dataset, size in (('ade20k', 96), ('coco', 96), ('imagenet', 64)):
        generate(dataset, cwd / 'data' / 'synthetic', num_train=5, num_val=5, size=size)
    return cwd


def png(path: Path) -> np.ndarray:
    import cv2
    return cv2.imread(str(path))[..., ::-1]  # RGB, as drawn


def browse(workspace: Path, scope: str, monkeypatch, samples: int = 2):
    from projects.lisa.apis.browse import browse as draw
    monkeypatch.chdir(workspace)  # the demo configs' data roots are relative
    return draw(Config.fromfile(DEMOS[scope]), workspace / 'out' / scope, samples)


def test_segmentation_samples_show_their_label_map(workspace, monkeypatch):
    drawn = browse(workspace, 'mmseg', monkeypatch)
    assert len(drawn) == 2 and len(list((workspace / 'out' / 'mmseg').glob('*.png'))) == 2
    for sample in drawn:
        image, labels = png(sample.path), sample.data_sample.gt_sem_seg.data[0]
        assert image.shape == sample.image.shape == (*labels.shape, 3)  # the image as cropped, with its labels
        assert max(labels.shape) <= 96  # the demo's crop: 96 x 96 at most (the random resize may give less)
        changed = (image != sample.image).any(-1)
        labelled = labels < 150  # ADE20K's classes; 255 is ignored
        assert labelled.any() and changed[labelled].mean() > 0.9


def test_detection_samples_show_their_boxes_and_masks(workspace, monkeypatch):
    drawn = browse(workspace, 'mmdet', monkeypatch)
    for sample in drawn:
        image, instances = png(sample.path), sample.data_sample.gt_instances
        assert image.shape == sample.image.shape and image.shape[0] == 96  # the demo's scale (160, 96)
        masks = instances.masks.any(0)
        assert len(instances.bboxes) > 0 and masks.any()
        changed = (image != sample.image).any(-1)
        assert changed[masks].mean() > 0.9
        for x1, y1, _, y2 in np.asarray(instances.bboxes).round().astype(int):  # each box's outline is drawn
            assert changed[y1:y2 + 1, max(x1, 0)].mean() > 0.5


def test_classification_samples_show_their_class(workspace, monkeypatch):
    (sample, ) = browse(workspace, 'mmpretrain', monkeypatch, samples=1)
    image = png(sample.path)
    assert image.shape == sample.image.shape == (64, 64, 3)  # the demo's centre crop
    assert (image != sample.image).any(-1).mean() > 0.05  # the ground-truth class written over it
    assert 'gt_label' in sample.data_sample


def test_the_task_follows_the_default_scope_else_the_library_of_the_dataset_type():
    from projects.lisa.registry import config_scope as task_scope
    assert [task_scope(Config.fromfile(path)) for path in DEMOS.values()] == list(DEMOS)

    def config(dataset: str, scope: str | None = None) -> Config:
        return Config(dict(default_scope=scope, train_dataloader=dict(dataset=dict(type=dataset))))
    assert task_scope(config('CocoDataset')) == 'mmdet' and task_scope(config('ImageNet')) == 'mmpretrain'
    assert task_scope(config('ADE20KDataset', 'mmengine')) == 'mmseg'
    with pytest.raises(ValueError, match="default_scope=None and dataset type 'MyData' belong to none of mmseg"):
        task_scope(config('MyData'))


def test_bad_input_is_named(workspace, monkeypatch, tmp_path):
    from projects.lisa.apis.browse import browse as draw
    monkeypatch.chdir(workspace)
    cfg = Config.fromfile(DEMOS['mmseg'])
    with pytest.raises(ValueError, match='max_samples=0; expected a positive number'):
        draw(cfg, tmp_path, 0)
    monkeypatch.chdir(tmp_path)  # no data here
    with pytest.raises(FileNotFoundError, match='generate_data.py ade20k'):
        draw(cfg, tmp_path, 1)


@pytest.mark.slow  # imports the mm libraries in a subprocess
def test_tool_draws_the_samples_and_prints_its_verdict_alone(workspace):
    out = workspace / 'tool'
    proc = subprocess.run([sys.executable, str(ROOT / 'tools/browse_dataset.py'), str(DEMOS['mmdet']),
                           '--output-dir', str(out), '--max-samples', '3'], cwd=workspace, capture_output=True,
                          text=True, env={**os.environ, 'PYTHONPATH': str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == (f'3 samples of the train pipeline drawn into {out} '
                                         f"(the libraries' messages: {out / 'browse_dataset.log'})\n")
    assert len(list(out.glob('*.png'))) == 3
    assert 'loading annotations into memory' in (out / 'browse_dataset.log').read_text()  # pycocotools' print
