"""Bad data input: missing roots say where and how to prepare; corrupt files are named.

The datasets are real-format files written by ``projects.lisa.synthetic`` and
then damaged here; the errors are those a run of ``tools/train.py`` /
``tools/test.py`` meets (their :class:`projects.lisa.data_checks.data_check.Runner`).
"""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope
from PIL import Image

from projects.lisa.data_checks.data_check import DataError, Runner, check_data_roots
from projects.lisa.synthetic import generate

ROOT = Path(__file__).resolve().parents[1]
SEG = ROOT / 'configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py'
DET = ROOT / 'configs/detection/mask-rcnn_lisa-pvt-t_fpn_1x_coco.py'
SEG_DEMO = ROOT / 'configs/segmentation/demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'
DET_DEMO = ROOT / 'configs/detection/demo/mask-rcnn_lisa-pvt-t_fpn_1xb4-12e_synthetic-coco-96.py'


def with_data_root(path: Path, root: Path) -> Config:
    """The config with every dataloader (and the COCO metric) reading ``root``."""
    cfg = Config.fromfile(str(path))
    coco = cfg.default_scope == 'mmdet'
    root = f'{root}/' if coco else str(root)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        cfg[loader].dataset.data_root = root
        cfg[loader].num_workers, cfg[loader].persistent_workers = 0, False
    if coco:
        for evaluator in ('val_evaluator', 'test_evaluator'):
            cfg[evaluator].ann_file = root + 'annotations/instances_val2017.json'
    cfg.model.backbone.init_cfg = None  # from scratch: the demo's pretrained classifier is tools/demo.py's
    init_default_scope(cfg.default_scope)
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize('config,dataset,archive', [
    (SEG, 'ade20k', 'ADEChallengeData2016.zip'), (DET, 'coco', 'annotations_trainval2017.zip')])
def test_missing_dataset_root_says_where_data_is_expected_and_how_to_prepare_it(config, dataset, archive, tmp_path):
    cfg = with_data_root(config, tmp_path / 'nowhere')
    with pytest.raises(FileNotFoundError) as error:
        check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    message = str(error.value)
    assert repr(str(tmp_path / 'nowhere') + ('/' if dataset == 'coco' else '')) in message
    assert archive in message and f'python tools/generate_data.py {dataset} --out data' in message


@pytest.mark.slow
def test_missing_split_folder_is_named_even_when_the_root_exists(tmp_path):
    generate('ade20k', tmp_path, num_train=2, num_val=1, size=32, seed=0)
    root = tmp_path / 'ade' / 'ADEChallengeData2016'
    (root / 'annotations' / 'validation').rename(root / 'annotations' / 'val')
    cfg = with_data_root(SEG, root)
    check_data_roots(cfg, ('train_dataloader', ))  # the training split is complete
    with pytest.raises(FileNotFoundError, match='annotations/validation'):
        check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))


@pytest.mark.slow
def test_train_tool_stops_before_building_anything_when_data_is_missing(tmp_path):
    env = {**os.environ, 'PYTHONPATH': str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / 'tools/train.py'), str(SEG), '--work-dir', str(tmp_path / 'w')],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "'data/ade/ADEChallengeData2016' does not exist" in proc.stderr
    assert 'python tools/generate_data.py ade20k --out data' in proc.stderr
    assert 'Traceback' not in proc.stderr
    assert not (tmp_path / 'w').exists()


@pytest.fixture
def ade20k(tmp_path) -> Path:
    generate('ade20k', tmp_path, num_train=3, num_val=1, size=32, seed=0)
    return tmp_path / 'ade' / 'ADEChallengeData2016'


def first_batch(cfg: Config, loader: str = 'train_dataloader'):
    loader_cfg = cfg[loader]
    loader_cfg.sampler = dict(type='DefaultSampler', shuffle=False)
    loader_cfg.batch_size = 3
    # Earlier tests may leave another library's scope current; build in the config's own.
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return next(iter(Runner.build_dataloader(loader_cfg, seed=0)))


@pytest.mark.slow
def test_intact_data_loads_through_the_checking_runner(ade20k):
    batch = first_batch(with_data_root(SEG_DEMO, ade20k))
    assert len(batch['inputs']) == 3
    # The random resize draws from the global RNG, so sizes vary; image and labels stay aligned
    # and within the demo's 96 x 96 crop.
    for image, sample in zip(batch['inputs'], batch['data_samples']):
        assert image.shape[-2:] == sample.gt_sem_seg.data.shape[-2:]
        assert max(image.shape[-2:]) <= 96


@pytest.mark.slow
@pytest.mark.parametrize('folder,suffix,damage', [
    ('annotations', '.png', 'garbage'), ('annotations', '.png', 'truncated'), ('images', '.jpg', 'garbage')])
def test_corrupt_image_or_label_map_error_names_the_file(ade20k, folder, suffix, damage):
    bad = sorted((ade20k / folder / 'training').glob(f'*{suffix}'))[1]
    data = bad.read_bytes()
    bad.write_bytes(b'not an image at all' if damage == 'garbage' else data[:len(data) // 3])
    with pytest.raises(DataError) as error:
        first_batch(with_data_root(SEG_DEMO, ade20k))
    assert str(bad) in str(error.value) and 'sample 1' in str(error.value)


def test_corrupt_coco_annotation_file_error_names_the_file(tmp_path):
    generate('coco', tmp_path, num_train=2, num_val=1, size=32, seed=0)
    ann = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    ann.write_text(ann.read_text()[:-40])
    with pytest.raises(DataError) as error:
        first_batch(with_data_root(DET_DEMO, tmp_path / 'coco'))
    assert str(ann) in str(error.value)
    assert 'JSONDecodeError' in str(error.value)


# Invalid content: each error names the file, the bad value and what is valid, where the
# libraries crash far from the cause (`Target 199 is out of bounds`, `stack expects each tensor to be equal size`,
# `KeyError: 'mask'`, `need at least one array to concatenate`) or pass silently (`aAcc: nan`, zero box loss).

def damage_label(path: Path, damage: str) -> None:
    """Write an ADE20K label map back with one defect."""
    label = Image.open(path)
    if damage == 'value 200':
        array = np.array(label)
        array[:4, :4] = 200
        Image.fromarray(array).save(path)
    elif damage == 'rgb':
        label.convert('RGB').save(path)
    elif damage == 'size':
        label.resize((label.width + 8, label.height), Image.NEAREST).save(path)


def training_split(tmp_path: Path, dataset: str, num_train: int) -> tuple[Config, list[Path]]:
    """A generated ``'ade20k'`` or ``'coco'`` dataset of ``num_train`` training images: its demo config and the
    training images."""
    generate(dataset, tmp_path, num_train=num_train, num_val=1, size=32, seed=0)
    if dataset == 'ade20k':
        root = tmp_path / 'ade' / 'ADEChallengeData2016'
        return with_data_root(SEG_DEMO, root), sorted((root / 'images' / 'training').iterdir())
    return with_data_root(DET_DEMO, tmp_path / 'coco'), sorted((tmp_path / 'coco' / 'train2017').iterdir())


def damage_image(path: Path, damage: str) -> None:
    """Write an image back, under its own name (the decoders read the content, not the suffix), with one defect.

    A truncated JPEG keeps its header and the first half of its compressed pixels, as a copy cut short does
    (Pillow opens it; OpenCV 5 decodes no image from it, OpenCV 4 fills the rest grey); a truncated PNG is the
    first half of its bytes; ``'png without its end'`` lacks only the final 12-byte ``IEND`` chunk (Pillow decodes
    it, OpenCV does not). The 16-bit images hold the image's values at 16 bits: its colours 0..255 per channel,
    or its grey levels stretched to 0..1000 (decoded at 8 bits to 0..3) or to the full range 0..65535.
    """
    rgb = np.asarray(Image.open(path).convert('RGB'))
    grey = np.asarray(Image.open(path).convert('L')).astype(np.int64)
    grey = (grey - grey.min()) / (grey.max() - grey.min())  # 0..1, both ends reached
    encoded = io.BytesIO()
    if damage in ('truncated jpeg', 'truncated png', 'png without its end'):
        Image.fromarray(rgb).save(encoded, format='JPEG' if 'jpeg' in damage else 'PNG')
        data = encoded.getvalue()
        start = data.index(b'\xff\xda') if damage == 'truncated jpeg' else 0  # JPEG: the start of the scan
        path.write_bytes(data[:-12] if damage == 'png without its end' else data[:(start + len(data)) // 2])
    elif damage == '16-bit colour 0..255':
        path.write_bytes(cv2.imencode('.png', rgb[..., ::-1].astype(np.uint16))[1].tobytes())
    elif damage in ('16-bit 0..1000', '16-bit 0..65535'):
        top = 1000 if damage == '16-bit 0..1000' else 65535
        Image.fromarray(np.round(grey * top).astype(np.uint16)).save(path, format='PNG')
    else:
        raise ValueError(f'unknown damage {damage!r}')


TRUNCATIONS = ('truncated jpeg', 'truncated png', 'png without its end')


@pytest.mark.parametrize('damage', [*TRUNCATIONS, '16-bit 0..1000'])
@pytest.mark.parametrize('dataset', ['ade20k', 'coco'])
def test_training_on_an_image_it_cannot_use_stops_naming_the_file(tmp_path, dataset, damage):
    """A truncated image stops training with its name, not with ``TypeError: 'NoneType' object is not
    subscriptable`` (OpenCV decodes no image from it), which names no file; so does a 16-bit image that
    decodes to 0..3."""
    cfg, images = training_split(tmp_path, dataset, 3)
    bad = images[1]
    damage_image(bad, damage)
    with pytest.raises(DataError) as error:
        first_batch(cfg)
    assert str(bad) in str(error.value) and 'is invalid' in str(error.value)


ADE20K_DEFECTS = {  # damage: what the message must say
    'value 200': ['holds label value 200 (16 px)', 'valid: 0..150, 255 (the 150 classes are stored as 1..150'],
    'rgb': ["has 3 channels (PNG mode 'RGB'", "valid: a single-channel label map of class ids (PNG mode 'L' or 'P')"],
    'size': ['is 32x', 'but its image', 'valid: a label map of the same size as its image'],
}


@pytest.mark.parametrize('loader,folder', [('train_dataloader', 'training'), ('val_dataloader', 'validation')])
@pytest.mark.parametrize('damage', list(ADE20K_DEFECTS))
def test_invalid_label_map_is_named_with_its_value_and_what_is_valid(ade20k, loader, folder, damage):
    bad = sorted((ade20k / 'annotations' / folder).glob('*.png'))[0]
    damage_label(bad, damage)
    with pytest.raises(DataError) as error:
        first_batch(with_data_root(SEG_DEMO, ade20k), loader)
    message = str(error.value)
    assert str(bad) in message and 'sample 0 is invalid' in message
    for text in ADE20K_DEFECTS[damage]:
        assert text in message


@pytest.mark.slow
def test_training_on_a_label_value_outside_the_classes_stops_naming_the_file_not_target_199(ade20k, tmp_path):
    # The libraries' own failure: mmseg stores 200 - 1 = 199, and the loss raises `Target 199 is out of bounds`.
    bad = sorted((ade20k / 'annotations' / 'training').glob('*.png'))[2]
    Image.fromarray(np.full_like(np.asarray(Image.open(bad)), 200)).save(bad)  # no crop can miss it
    cfg = with_data_root(SEG_DEMO, ade20k)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.train_dataloader.batch_size = 3
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=1, val_interval=10)
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=10)
    with pytest.raises(DataError, match=r'holds label value 200 .*valid: 0\.\.150, 255') as error:
        Runner.from_cfg(cfg).train()
    assert str(bad) in str(error.value)


@pytest.fixture
def coco(tmp_path) -> Path:
    generate('coco', tmp_path, num_train=3, num_val=1, size=32, seed=0)
    return tmp_path / 'coco'


def edit_annotations(ann_file: Path, edit) -> dict:
    """Apply ``edit`` to every annotation of a COCO json; returns the first annotation after the edit."""
    content = json.loads(ann_file.read_text())
    for ann in content['annotations']:
        edit(ann)
    ann_file.write_text(json.dumps(content))
    return content['annotations'][0]


COCO_DEFECTS = {  # name: (edit of every annotation, what the message must say)
    'zero width': (lambda ann: ann['bbox'].__setitem__(2, 0.0),
                   ['has width 0.0', 'valid: width and height of at least 1 px',
                    'filter_empty_gt keeps the image, so it would train as background']),
    'no segmentation': (lambda ann: ann.pop('segmentation'),
                        ['has no segmentation', 'valid: polygons [[x1, y1, x2, y2, x3, y3, ...], ...] or an RLE']),
    'unknown category': (lambda ann: ann.__setitem__('category_id', 999),
                         ['category_id 999 is not a category of the file',
                          'valid: one of its 80 category ids: 1..11, 13..25, 27..28, 31..44, 46..65, 67, 70, '
                          '72..82, 84..90']),
}


@pytest.mark.parametrize('defect', list(COCO_DEFECTS))
def test_invalid_coco_annotation_is_named_with_its_id_value_and_what_is_valid(coco, defect):
    ann_file = coco / 'annotations' / 'instances_train2017.json'
    edit, texts = COCO_DEFECTS[defect]
    first = edit_annotations(ann_file, edit)
    with pytest.raises(DataError) as error:
        first_batch(with_data_root(DET_DEMO, coco))
    message = str(error.value)
    assert f'{ann_file} (annotation id {first["id"]}, image ' in message
    for text in texts:
        assert text in message


def test_data_paths_of_a_dataset_whose_prefix_is_one_folder():
    # mmpretrain's ImageNet takes data_prefix='train' (a string), mmseg/mmdet a dict.
    from projects.lisa.data_checks.data_check import dataset_files
    assert dataset_files(dict(data_root='data/imagenet', data_prefix='train', ann_file='meta/train.txt')) == [
        'data/imagenet', 'data/imagenet/train', 'data/imagenet/meta/train.txt']
    assert dataset_files(dict(data_root='d', data_prefix=dict(img_path='images', seg_map_path=''))) == [
        'd', 'd/images']


def test_training_with_ade20k_dataset_and_custom_classes_names_base_seg_dataset(ade20k):
    """ADE20KDataset(metainfo=dict(classes=...)) stops with the BaseSegDataset fix, not mmseg's 'not a subset'
    ValueError."""
    cfg = with_data_root(SEG_DEMO, ade20k)
    cfg.train_dataloader.dataset.metainfo = dict(classes=('background', 'object'))
    with pytest.raises(DataError) as error:
        first_batch(cfg)
    message = str(error.value)
    assert "ADE20KDataset takes only its own 150 classes" in message and "('background', 'object')" in message
    assert "type='BaseSegDataset', img_suffix='.jpg', seg_map_suffix='.png', reduce_zero_label=True" in message


@pytest.mark.slow
def test_an_evaluation_split_with_a_sample_it_cannot_evaluate_stops_before_evaluating_any(tmp_path):
    # A 1x1 image and label map as the last of 3 test samples: mmseg's LoadAnnotations squeezes the map to 0-d
    # and the pipeline fails on it, after the samples before it were evaluated.
    from mmengine.hooks import Hook
    generate('ade20k', tmp_path, num_train=1, num_val=3, size=32, seed=0)
    root = tmp_path / 'ade' / 'ADEChallengeData2016'
    image = sorted((root / 'images' / 'validation').iterdir())[-1]
    Image.fromarray(np.zeros((1, 1, 3), np.uint8) + 7).save(image, format='JPEG')
    Image.fromarray(np.ones((1, 1), np.uint8)).save(root / 'annotations' / 'validation' / f'{image.stem}.png')
    cfg = with_data_root(SEG_DEMO, root)
    cfg.work_dir = str(tmp_path / 'work')

    class Evaluated(Hook):
        count = 0

        def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            Evaluated.count += 1

    runner = Runner.from_cfg(cfg)
    runner.register_hook(Evaluated())
    with pytest.raises(DataError) as error:
        runner.test()
    assert Evaluated.count == 0
    message = str(error.value)
    assert 'nothing was evaluated' in message and str(root / 'annotations' / 'validation' / f'{image.stem}.png') in \
        message and 'is 1x1 (HxW)' in message
