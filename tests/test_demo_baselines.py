"""The demo's chance baselines (``projects/lisa/analysis/baselines.py``) and its pass/fail judgement.

References: values derived by hand from small hand-made label sets and boxes (each test says how),
and, for the judgement, hand-written ``mim test`` results beside tiny generated datasets: no training.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from projects.lisa.analysis import baselines
from projects.lisa.synthetic import generate
from tools import demo

ROOT = Path(__file__).resolve().parents[1]


def test_majority_accuracy_is_the_share_of_the_training_majority_in_val():
    # 'a' is the training majority (2 of 4); 1 of the 4 validation labels is 'a'
    assert baselines.majority_accuracy(['a', 'a', 'b', 'c'], ['a', 'b', 'b', 'c']) == 25.0
    # balanced over 5 classes: 1 / 5
    assert baselines.majority_accuracy(list(range(5)) * 3, list(range(5)) * 2) == 20.0
    with pytest.raises(ValueError, match='need training and validation labels, got 3 and 0'):
        baselines.majority_accuracy([1, 2, 3], [])


def test_classification_baseline_reads_the_class_folders(tmp_path):
    for split, counts in (('train', dict(cat=3, dog=1)), ('val', dict(cat=1, dog=3))):
        for name, count in counts.items():
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(count):
                (tmp_path / split / name / f'{name}_{i}.JPEG').touch()
    (tmp_path / 'train' / 'dog' / 'notes.txt').touch()  # not an image: not counted (else dog would tie)
    assert baselines.classification_baseline(tmp_path) == 25.0  # majority cat: 1 of 4 val images
    with pytest.raises(FileNotFoundError, match='no images in class folders'):
        baselines.classification_baseline(tmp_path / 'missing')


def write_labels(folder: Path, maps: list[list[list[int]]]) -> None:
    folder.mkdir(parents=True)
    for i, label in enumerate(maps):
        Image.fromarray(np.array(label, dtype=np.uint8)).save(folder / f'{i}.png')


def test_segmentation_baseline_from_hand_made_label_maps(tmp_path):
    root = tmp_path / 'ADEChallengeData2016' / 'annotations'
    # training: wall (1) 5 pixels, floor (4) 4, unlabelled (0) 3 -> the majority is wall
    write_labels(root / 'training', [[[1, 1, 1, 4], [4, 0, 0, 0]], [[1, 1, 4, 4]]])
    # validation: 5 labelled pixels, 2 wall, 2 floor, 1 painting (23): K = 3 classes present;
    # IoU_wall = 2 / 5 (predicted on all 5), the others 0 -> mIoU = 2 / 15; Acc_wall = 1 -> mAcc = 1 / 3
    write_labels(root / 'validation', [[[1, 1, 4], [0, 23, 4]]])
    result = baselines.segmentation_baseline(root.parent)
    assert result == pytest.approx(dict(mIoU=100 * 2 / 15, mAcc=100 / 3))


def test_segmentation_baseline_when_the_majority_is_absent_from_val():
    # wall (1) predicted, only floor (4) labelled: IoU 0 for both (K = 2), Acc_floor 0
    train, val = np.zeros(256, dtype=int), np.zeros(256, dtype=int)
    train[[1, 4]], val[4] = (7, 3), 2
    assert baselines.majority_class_iou(train, val) == dict(mIoU=0.0, mAcc=0.0)
    with pytest.raises(ValueError, match='need labelled pixels in both splits, got 10 training and 0 validation'):
        baselines.majority_class_iou(train, np.zeros(256, dtype=int))


def coco(boxes: list[list[float]], width: int = 10, height: int = 10, category: int = 1) -> dict:
    """A COCO dict of one ``width`` x ``height`` image holding ``boxes`` (xywh) of ``category``."""
    return dict(images=[dict(id=1, width=width, height=height, file_name='1.jpg')],
                annotations=[dict(id=i + 1, image_id=1, category_id=category, bbox=box, area=box[2] * box[3],
                                  iscrowd=0) for i, box in enumerate(boxes)],
                categories=[dict(id=1, name='one'), dict(id=2, name='two')])


@pytest.mark.parametrize('scores, expected', [((0.9, 0.5), 50.0), ((0.5, 0.9), 100.0)], ids=['fp-first', 'tp-first'])
def test_box_ap_of_hand_ranked_detections(scores, expected):
    """One ground-truth box; a miss (IoU 1/100) and an exact hit. With the miss ranked first, recall 1 is
    reached at precision 1/2, so the interpolated precision is 1/2 at every recall: AP = AP50 = 50."""
    gt = coco([[0, 0, 10, 10]])
    detections = [dict(image_id=1, category_id=1, bbox=box, score=score)
                  for box, score in zip(([0, 0, 1, 1], [0, 0, 10, 10]), scores)]
    assert baselines.box_ap(gt, detections) == pytest.approx({'box AP': expected, 'box AP50': expected})


def test_random_detections_take_training_sizes_and_classes_and_stay_inside_the_image():
    gt = coco([[0, 0, 5, 5]], width=30, height=20)
    train = coco([[0, 0, 4, 6], [3, 3, 12, 8]], category=2)
    train['annotations'].append(dict(id=9, image_id=1, category_id=1, bbox=[0, 0, 1, 1], area=1, iscrowd=1))
    detections = baselines.random_detections(gt, train, per_image=200, rng=np.random.default_rng(0))
    assert len(detections) == 200
    assert {d['category_id'] for d in detections} == {2}  # the crowd box's class is never drawn
    assert {tuple(d['bbox'][2:]) for d in detections} == {(4, 6), (12, 8)}
    for d in detections:
        x, y, w, h = d['bbox']
        assert 0 <= x <= 30 - w and 0 <= y <= 20 - h and 0 <= d['score'] < 1


def test_detection_baseline_extremes(tmp_path):
    """Training boxes the size of the image: every random box is the ground truth box (AP 100).
    Training boxes of 1 x 1: IoU 1/100 with it, below every COCO threshold (AP 0)."""
    for train_box, expected in (([0, 0, 10, 10], 100.0), ([2, 2, 1, 1], 0.0)):
        annotations = tmp_path / str(expected) / 'annotations'
        annotations.mkdir(parents=True)
        (annotations / 'instances_val2017.json').write_text(json.dumps(coco([[0, 0, 10, 10]])))
        (annotations / 'instances_train2017.json').write_text(json.dumps(coco([train_box])))
        result = baselines.detection_baseline(annotations.parent, per_image=10, repeats=2)
        assert result == pytest.approx({'box AP': expected, 'box AP50': expected})


@pytest.mark.parametrize('value, baseline, passed', [
    (40.0, 20.0, True), (39.9, 20.0, False),  # 2x the baseline binds above 10 points
    (11.0, 1.0, True), (10.9, 1.0, False),  # +10 points binds below it
])
def test_a_stage_must_clear_twice_its_baseline_and_ten_points(value, baseline, passed):
    assert baselines.Judged('stage', 'metric', value, baseline).passed is passed


@pytest.fixture(scope='module')
def tiny_demo(tmp_path_factory) -> tuple[Path, Path]:
    """Tiny generated datasets under ``data`` and, under ``work``, each stage's ``mim test`` result as
    MMEngine writes it (``test/<timestamp>/<timestamp>.json`` beside the dumped config): the classifier
    at chance, the dense stages far above it."""
    root = tmp_path_factory.mktemp('demo')
    data, work = root / 'data', root / 'work'
    for dataset, (num_train, num_val) in (('imagenet', (5, 5)), ('ade20k', (2, 2)), ('coco', (3, 2))):
        generate(dataset, data, num_train=num_train, num_val=num_val, size=32, seed=0)
    written = {'pvt-tiny_lisa': {'accuracy/top1': 20.0}, 'fpn_lisa-pvt-t': {'mIoU': 90.0},
               'mask-rcnn_lisa-pvt-t': {'coco/bbox_mAP': 0.8}}
    for work_dir, config in zip(written, (demo.CLS_CONFIG, demo.SEG_CONFIG, demo.DET_CONFIG)):
        run = work / work_dir / 'test' / '20260101_000000'
        run.mkdir(parents=True)
        (run / f'{run.name}.json').write_text(json.dumps(written[work_dir]))
        (run.parent / Path(config).name).write_text('')
    return work, data


def test_demo_judges_each_stage_by_its_test_metric_and_its_own_baseline(tiny_demo):
    work, data = tiny_demo
    judged = {j.stage: j for j in demo.judged(work, data)}
    assert {s: (j.metric, j.value) for s, j in judged.items()} == {
        'classifier': ('top-1', 20.0), 'Semantic FPN': ('mIoU', 90.0), 'Mask R-CNN': ('box AP', 80.0)}
    assert judged['classifier'].baseline == 20.0  # 5 val images, one per class
    assert judged['Semantic FPN'].baseline == baselines.segmentation_baseline(
        data / 'ade' / 'ADEChallengeData2016')['mIoU']
    assert judged['Mask R-CNN'].baseline == baselines.detection_baseline(data / 'coco')['box AP']


def test_demo_exits_non_zero_naming_the_stage_below_its_baseline(tiny_demo, capsys):
    work, data = tiny_demo
    with pytest.raises(SystemExit) as exit_:
        demo.judge(demo.judged(work, data))
    assert exit_.value.code != 0 and 'demo failed: classifier did not clear' in str(exit_.value.code)
    printed = capsys.readouterr().out
    assert 'classifier: top-1 20.00, chance 20.00; needs 40.00' in printed and 'FAILS' in printed
    passing = [j for j in demo.judged(work, data) if j.stage != 'classifier']
    demo.judge(passing)  # no exit
    assert baselines.shortfall(passing) is None


def test_demo_names_the_stage_whose_test_result_is_missing(tiny_demo, tmp_path):
    work, data = tiny_demo
    with pytest.raises(baselines.MissingResult, match=r'\[classifier\] no top-1 in a test result under'):
        demo.judged(tmp_path, data)
