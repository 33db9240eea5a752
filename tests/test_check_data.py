"""tools/check_data.py and its rules (projects.lisa.data_checks.split_check and the checks it runs): every invalid
sample of a split is listed with its file, the bad value and what is valid; intact data passes.

The datasets are real-format files of ``projects.lisa.synthetic`` with defects injected here; the rules are
compared with what the libraries' own loaders do with the same files.
"""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import mmcv
import numpy as np
import pytest
from mmengine.registry import init_default_scope
from PIL import Image, ImageFile
from test_downstream_data_errors import (
    COCO_DEFECTS,
    DET_DEMO,
    SEG_DEMO,
    TRUNCATIONS,
    damage_image,
    damage_label,
    edit_annotations,
    training_split,
    with_data_root,
)

from projects.lisa.data_checks.data_problems import Problem, ranges
from projects.lisa.data_checks.image_check import image_size
from projects.lisa.data_checks.label_map_check import LabelMapCheck
from projects.lisa.data_checks.split_check import CLASSES, check_config_data, check_samples
from projects.lisa.synthetic import generate

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, 'PYTHONPATH': str(ROOT), 'OMP_NUM_THREADS': '1'}


def samples(problems: list[Problem]) -> list[Problem]:
    """The problems of samples and annotations, without the note on the classes the tiny splits lack."""
    return [p for p in problems if p.where != CLASSES]


@pytest.fixture
def ade20k(tmp_path) -> Path:
    generate('ade20k', tmp_path, num_train=6, num_val=2, size=32, seed=0)
    return tmp_path / 'ade' / 'ADEChallengeData2016'


@pytest.fixture
def damaged_ade20k(ade20k) -> dict[str, Path]:
    """Training labels 1, 3, 4 damaged (value 200, RGB, wrong size); the validation split intact."""
    labels = sorted((ade20k / 'annotations' / 'training').glob('*.png'))
    damaged = {'value 200': labels[1], 'rgb': labels[3], 'size': labels[4]}
    for damage, path in damaged.items():
        damage_label(path, damage)
    return damaged


def test_label_rules_are_those_of_mmseg_loading(tmp_path):
    # Reference: mmseg's LoadAnnotations on a label map holding every uint8 value; a stored value is valid iff
    # the loaded target is a class or the ignore index.
    from mmseg.datasets.transforms import LoadAnnotations
    path = tmp_path / 'all.png'
    Image.fromarray(np.arange(256, dtype=np.uint8).reshape(16, 16)).save(path)
    for reduce_zero_label in (True, False):
        loaded = LoadAnnotations(reduce_zero_label=reduce_zero_label)(
            dict(seg_map_path=str(path), reduce_zero_label=reduce_zero_label, seg_fields=[]))['gt_seg_map']
        expected = (loaded.ravel() < 150) | (loaded.ravel() == 255)
        check = LabelMapCheck(num_classes=150, reduce_zero_label=reduce_zero_label)
        np.testing.assert_array_equal(check.is_valid(np.arange(256)), expected)
    assert LabelMapCheck(150, True).valid_values.startswith('0..150, 255 ')
    assert LabelMapCheck(150, False).valid_values.startswith('0..149, 255 ')
    assert not LabelMapCheck(150, False).is_valid(np.array([256, 300, -1])).any()  # mmseg casts to uint8


def test_image_size_is_the_size_opencv_decodes_exif_rotated_images_to(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise
    path = tmp_path / 'rotated.jpg'
    Image.fromarray(np.zeros((40, 100, 3), np.uint8)).save(path, exif=exif.tobytes())
    assert image_size(str(path)) == mmcv.imread(str(path)).shape[:2] == (100, 40)


def test_ranges_are_compact_and_sorted():
    assert ranges([5, 1, 2, 3, 9, 8, 3]) == '1..3, 5, 8..9'
    assert ranges([]) == ''


def test_every_invalid_label_map_of_a_split_is_listed_and_intact_splits_pass(damaged_ade20k, ade20k):
    found = check_config_data(with_data_root(SEG_DEMO, ade20k), ('train_dataloader', 'val_dataloader'), workers=2)
    assert samples(found['val_dataloader']) == []
    problems = samples(found['train_dataloader'])
    assert sorted(p.file for p in problems) == sorted(map(str, damaged_ade20k.values()))
    by_file = {p.file: p for p in problems}
    assert by_file[str(damaged_ade20k['value 200'])].problem.startswith('holds label value 200 (16 px)')
    assert by_file[str(damaged_ade20k['rgb'])].problem.startswith("has 3 channels (PNG mode 'RGB'")
    assert 'but its image' in by_file[str(damaged_ade20k['size'])].problem
    assert all(p.error for p in problems)


def test_parallel_scan_finds_what_a_serial_scan_finds(damaged_ade20k, ade20k):
    from projects.lisa.data_checks.dataset_loading import load_dataset
    cfg = with_data_root(SEG_DEMO, ade20k)
    dataset, _ = load_dataset(cfg.train_dataloader.dataset)
    serial = samples(check_samples(dataset, workers=1))
    assert len(serial) == 3
    assert samples(check_samples(dataset, workers=3, chunk=1)) == serial


def test_every_invalid_coco_annotation_is_listed_with_its_id(coco_with_defects):
    ann_file, defects = coco_with_defects
    init_default_scope('mmdet')
    problems = samples(check_config_data(with_data_root(DET_DEMO, ann_file.parents[1]), ('train_dataloader', ))[
        'train_dataloader'])
    errors = {(p.where.split(',')[0], p.problem) for p in problems if p.error and p.where.startswith('annotation')}
    assert errors == {(f'annotation id {i}', text) for i, text in defects.items()}
    assert all(p.file == str(ann_file) for p in problems)


@pytest.fixture
def coco_with_defects(tmp_path) -> tuple[Path, dict[int, str]]:
    """A COCO training json with its first, second and last annotation damaged; returns it and each damaged id's
    problem. The first one crashes mmdet's parsing, yet the others are found."""
    generate('coco', tmp_path, num_train=4, num_val=1, size=32, seed=0)
    ann_file = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    last = len(json.loads(ann_file.read_text())['annotations'])
    edits = {1: lambda ann: ann.__setitem__('bbox', [1.0, 2.0, 3.0]), 2: COCO_DEFECTS['no segmentation'][0],
             last: COCO_DEFECTS['unknown category'][0]}
    edit_annotations(ann_file, lambda ann: edits.get(ann['id'], lambda _: None)(ann))
    return ann_file, {1: 'bbox [1.0, 2.0, 3.0] is not [x, y, width, height]', 2: 'has no segmentation',
                      last: 'category_id 999 is not a category of the file'}


def test_a_few_degenerate_coco_boxes_are_notes_not_errors(tmp_path):
    # As the two zero-height boxes of the official instances_train2017.json: mmdet drops them, the images
    # keep their other objects.
    generate('coco', tmp_path, num_train=4, num_val=1, size=32, seed=0)
    ann_file = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    content = json.loads(ann_file.read_text())
    counts = np.bincount([a['image_id'] for a in content['annotations']])
    image = int(np.argmax(counts))
    assert counts[image] >= 2
    victim = next(a for a in content['annotations'] if a['image_id'] == image)
    victim['bbox'][3], victim['area'] = 0.0, 0.0
    ann_file.write_text(json.dumps(content))
    init_default_scope('mmdet')
    problems = samples(check_config_data(with_data_root(DET_DEMO, tmp_path / 'coco'), ('train_dataloader', ))[
        'train_dataloader'])
    assert [(p.error, p.where.split(',')[0]) for p in problems] == [(False, f'annotation id {victim["id"]}')]
    assert 'height 0.0' in problems[0].problem


@pytest.mark.slow
def test_check_data_tool_lists_every_bad_sample_and_exits_non_zero(damaged_ade20k, ade20k, tmp_path):
    command = [sys.executable, str(ROOT / 'tools/check_data.py'), str(SEG_DEMO), '--workers', '2',
               '--cfg-options', f'train_dataloader.dataset.data_root={ade20k}',
               f'val_dataloader.dataset.data_root={ade20k}']
    proc = subprocess.run(command + ['--split', 'train'], env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert 'train_dataloader: 3 errors:' in proc.stdout and 'val_dataloader' not in proc.stdout
    for path in damaged_ade20k.values():
        assert str(path) in proc.stdout
    proc = subprocess.run(command + ['--split', 'val'], env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith('val_dataloader: 1 note'), proc.stderr  # classes lacked
    assert 'error' not in proc.stdout and 'never occur' in proc.stdout


@pytest.mark.slow
def test_train_tool_with_check_data_stops_before_building_the_model(damaged_ade20k, ade20k, tmp_path):
    command = [sys.executable, str(ROOT / 'tools/train.py'), str(SEG_DEMO), '--check-data',
               '--work-dir', str(tmp_path / 'work'), '--cfg-options',
               f'train_dataloader.dataset.data_root={ade20k}', f'val_dataloader.dataset.data_root={ade20k}']
    proc = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert '3 errors:' in proc.stderr and str(damaged_ade20k['value 200']) in proc.stderr
    assert 'Traceback' not in proc.stderr
    assert not (tmp_path / 'work').exists()


def test_an_empty_split_is_reported_not_a_traceback(ade20k):
    """An empty split is a problem naming its folder, not a traceback (a pool of 0 processes)."""
    for folder in ('images', 'annotations'):
        for path in (ade20k / folder / 'training').iterdir():
            path.unlink()
    found = check_config_data(with_data_root(SEG_DEMO, ade20k), ('train_dataloader', 'val_dataloader'), workers=2)
    assert samples(found['val_dataloader']) == []
    [problem] = found['train_dataloader']
    assert problem.error and problem.problem.startswith('has no samples') and str(ade20k) in problem.file


def test_a_16_bit_image_that_decodes_to_black_is_an_error(ade20k):
    """A 16-bit image with values below 256 decodes to all-zero input, so it is an error.
    The reference is the loader itself: mmcv.imread decodes the image to zeros."""
    image = sorted((ade20k / 'images' / 'training').iterdir())[2]
    pixels = np.asarray(Image.open(image).convert('L')).astype(np.uint16) // 2  # 0..127 in 16 bits
    Image.fromarray(pixels).save(image, format='PNG')
    assert Image.open(image).mode.startswith('I;16') and pixels.max() > 0
    assert not mmcv.imread(str(image)).any()
    problems = check_config_data(with_data_root(SEG_DEMO, ade20k), ('train_dataloader', ), workers=1)
    [problem] = samples(problems['train_dataloader'])
    assert problem.file == str(image) and problem.error and 'decodes to the constant 0' in problem.problem


@pytest.mark.parametrize('dataset', ['ade20k', 'coco'])
def test_every_image_the_loader_cannot_decode_in_full_is_an_error_naming_it(tmp_path, dataset):
    """A JPEG cut short (its header intact) is named, not a ``TypeError: 'NoneType' object is not subscriptable``
    that names no file: OpenCV, the decoder of mmcv's ``LoadImageFromFile``, decodes no image from it. Nor does
    it from a PNG that lacks only its end, which Pillow decodes."""
    cfg, images = training_split(tmp_path, dataset, 4)
    damaged = dict(zip(TRUNCATIONS, map(str, images)))
    for damage, path in damaged.items():
        damage_image(Path(path), damage)
    problems = samples(check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader'])
    assert sorted(p.file for p in problems) == sorted(damaged.values()) and all(p.error for p in problems)
    for problem in problems:
        assert problem.problem.startswith('cannot be read as an image') and 'truncated' in problem.problem
        assert problem.valid.startswith('a complete JPEG or PNG file')


def test_a_truncated_jpeg_is_named_where_opencv_decodes_it_in_part(ade20k, monkeypatch):
    """OpenCV 4 decodes a JPEG cut short to the rows it holds and fills the rest grey, where
    OpenCV 5 decodes none; the check names the file with either. OpenCV 4 is played by libjpeg through Pillow,
    which decodes a file cut short the same way when told to load truncated images."""
    decode = cv2.imdecode

    def decode_in_part(buffer: np.ndarray, flags: int) -> np.ndarray | None:
        monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', True)
        try:
            with Image.open(io.BytesIO(buffer.tobytes())) as image:
                return np.ascontiguousarray(np.asarray(image.convert('RGB'))[..., ::-1])
        except OSError:
            return decode(buffer, flags)
        finally:
            monkeypatch.setattr(ImageFile, 'LOAD_TRUNCATED_IMAGES', False)

    image = sorted((ade20k / 'images' / 'training').iterdir())[0]
    damage_image(image, 'truncated jpeg')
    monkeypatch.setattr(cv2, 'imdecode', decode_in_part)
    rows = mmcv.imread(str(image))[:, 0, 0]
    assert rows.shape == image_size(str(image))[:1] and rows[-1] == 128 and (rows[:4] != 128).any()  # grey below
    [problem] = samples(check_config_data(with_data_root(SEG_DEMO, ade20k), ('train_dataloader', ), workers=1)[
        'train_dataloader'])
    assert problem.file == str(image) and problem.error and 'truncated' in problem.problem


@pytest.mark.parametrize('dataset', ['ade20k', 'coco'])
def test_16_bit_images_are_named_16_bit_and_an_error_where_they_decode_near_black(tmp_path, dataset):
    """A 16-bit colour PNG of values 0..255 is named 16-bit besides 'constant colour (0, 0, 0)', and a 16-bit
    image of values 0..1000, which decodes to 0..3, is an error, not a note. The reference is the loader:
    mmcv.imread keeps the high byte of each 16-bit value."""
    cfg, images = training_split(tmp_path, dataset, 4)
    damaged = dict(zip(('16-bit colour 0..255', '16-bit 0..1000', '16-bit 0..65535'), map(str, images)))
    for damage, path in damaged.items():
        damage_image(Path(path), damage)
    decoded = {damage: mmcv.imread(path) for damage, path in damaged.items()}
    assert not decoded['16-bit colour 0..255'].any()
    assert (decoded['16-bit 0..1000'].min(), decoded['16-bit 0..1000'].max()) == (0, 3)
    assert (decoded['16-bit 0..65535'].min(), decoded['16-bit 0..65535'].max()) == (0, 255)
    problems = samples(check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader'])
    by_file = {p.file: p for p in problems}
    assert sorted(by_file) == sorted(damaged.values())
    colour, dark, full = (by_file[damaged[d]] for d in damaged)
    assert colour.error and colour.problem.startswith('is a 16-bit colour image')
    assert 'constant colour (0, 0, 0)' in colour.problem
    assert dark.error and dark.problem.startswith('is a 16-bit greyscale image') and 'values 0..1000' in dark.problem
    assert 'decodes to 0..3' in dark.problem
    assert not full.error and full.problem.startswith('is a 16-bit greyscale image')


def _replace_sample(ade20k: Path, index: int, image: np.ndarray, label: np.ndarray) -> tuple[Path, Path]:
    """Training sample ``index`` rewritten as ``image`` (RGB) and ``label``; returns their paths."""
    paths = (sorted((ade20k / 'images' / 'training').iterdir())[index],
             sorted((ade20k / 'annotations' / 'training').iterdir())[index])
    Image.fromarray(image).save(paths[0], format='PNG')  # lossless, whatever the suffix
    Image.fromarray(label).save(paths[1])
    return paths


def test_images_smaller_than_the_pipeline_allows_are_errors(ade20k):
    """1-px sides and images that the smallest RandomResize scale rescales to 0 px, which crash training, are
    errors. The references are mmseg's own transforms on the same files."""
    from mmengine.dataset import Compose
    cfg = with_data_root(SEG_DEMO, ade20k)
    rng = np.random.default_rng(0)
    thin = _replace_sample(ade20k, 1, rng.integers(0, 255, (1, 50, 3), np.uint8), np.full((1, 50), 3, np.uint8))
    # RandomResize(scale=(384, 96), ratio_range=(0.5, 2.0)) draws (192, 48) at least: a 2x1000 image rescales by
    # min(192 / 1000, 48 / 2) to height int(2 * 0.192 + 0.5) = 0, a 2x400 image to int(0.96 + 0.5) = 1.
    flat = _replace_sample(ade20k, 2, rng.integers(0, 255, (2, 1000, 3), np.uint8), np.full((2, 1000), 3, np.uint8))
    kept = _replace_sample(ade20k, 3, rng.integers(0, 255, (2, 400, 3), np.uint8), np.full((2, 400), 3, np.uint8))
    pipeline = [dict(t, ratio_range=(0.5, 0.5)) if t['type'] == 'RandomResize' else t
                for t in cfg.train_dataloader.dataset.pipeline]  # the smallest scale the pipeline draws
    loads = Compose(pipeline)
    for (image, label), crashes in ((thin, True), (flat, True), (kept, False)):
        sample = dict(img_path=str(image), seg_map_path=str(label), reduce_zero_label=True, seg_fields=[])
        if crashes:
            with pytest.raises((ValueError, cv2.error)):  # LoadAnnotations' squeeze, OpenCV's resize to 0 px
                loads(sample)
        else:
            loads(sample)
    problems = samples(check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader'])
    by_file = {p.file: p for p in problems}
    assert sorted(by_file) == sorted([str(thin[1]), str(flat[0])]) and all(p.error for p in problems)
    assert 'is 1x50 (HxW)' in by_file[str(thin[1])].problem and 'squeeze' in by_file[str(thin[1])].problem
    assert 'is 2x1000 (HxW)' in by_file[str(flat[0])].problem and '(192, 48)' in by_file[str(flat[0])].problem


def test_a_constant_8_bit_image_is_an_error_with_its_value(ade20k):
    """An image of one colour (a broken export) is an error naming the colour. Reference: mmcv.imread decodes
    it to one BGR value."""
    image = sorted((ade20k / 'images' / 'training').iterdir())[0]
    Image.fromarray(np.full((*image_size(str(image)), 3), (10, 20, 30), np.uint8)).save(image, format='PNG')
    decoded = mmcv.imread(str(image))
    assert (decoded == decoded[0, 0]).all() and decoded[0, 0].tolist() == [30, 20, 10]
    [problem] = samples(check_config_data(with_data_root(SEG_DEMO, ade20k), ('train_dataloader', ), workers=1)[
        'train_dataloader'])
    assert problem.file == str(image) and problem.error and 'constant colour (10, 20, 30)' in problem.problem


def _two_class_split(tmp_path: Path, objects: bool = True) -> Path:
    """Three 16x16 label maps storing 0 = background, 1 = object (if ``objects``), as users export them."""
    for folder in ('img', 'ann'):
        (tmp_path / folder).mkdir()
    for i in range(3):
        label = np.zeros((16, 16), np.uint8)
        label[4:9, 2 + i:8 + i] = 1 if objects else 0
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (16, 16, 3), np.uint8)).save(
            tmp_path / 'img' / f'{i}.png')
        Image.fromarray(label).save(tmp_path / 'ann' / f'{i}.png')
    return tmp_path


def _two_class_cfg(root: Path, reduce_zero_label: bool, classes=('background', 'object')) -> dict:
    from mmengine.config import Config
    init_default_scope('mmseg')
    dataset = dict(type='BaseSegDataset', data_root=str(root), data_prefix=dict(img_path='img', seg_map_path='ann'),
                   img_suffix='.png', seg_map_suffix='.png', reduce_zero_label=reduce_zero_label,
                   metainfo=dict(classes=classes),
                   pipeline=[dict(type='LoadImageFromFile'), dict(type='LoadAnnotations')])
    return Config(dict(default_scope='mmseg', train_dataloader=dict(dataset=dataset)))


def test_classes_absent_from_a_split_are_reported_with_the_reduce_zero_label_advice(tmp_path):
    """0 = background, 1 = object under reduce_zero_label=True leaves 'object' absent (the
    stored 1 becomes class 0, the stored 0 is ignored). Reference: the classes mmseg's LoadAnnotations yields."""
    from mmseg.datasets.transforms import LoadAnnotations
    root = _two_class_split(tmp_path)
    loaded = {int(v) for path in (root / 'ann').iterdir()
              for v in np.unique(LoadAnnotations(reduce_zero_label=True)(dict(
                  seg_map_path=str(path), reduce_zero_label=True, seg_fields=[]))['gt_seg_map'])}
    assert loaded == {0, 255}  # class 1 'object' never occurs
    [problem] = check_config_data(_two_class_cfg(root, True), ('train_dataloader', ), workers=1)['train_dataloader']
    assert problem.error  # all classes but one absent
    assert "class 1 'object'" in problem.problem and 'reduce_zero_label=False' in problem.valid
    assert check_config_data(_two_class_cfg(root, False), ('train_dataloader', ), workers=1)['train_dataloader'] == []
    # A third class that the split lacks is a note: a split may lack a rare class.
    [note] = check_config_data(_two_class_cfg(root, False, ('background', 'object', 'rare')), ('train_dataloader', ),
                               workers=1)['train_dataloader']
    assert not note.error and "class 2 'rare'" in note.problem


def test_ade20k_dataset_with_custom_classes_names_base_seg_dataset_as_the_fix(ade20k):
    """ADE20KDataset(metainfo=dict(classes=...)), which mmseg refuses with a 'not a subset' traceback, is an
    error whose fix is BaseSegDataset with ADE20K's suffixes and reduce_zero_label."""
    cfg = with_data_root(SEG_DEMO, ade20k)
    cfg.train_dataloader.dataset.metainfo = dict(classes=('background', 'object'))
    [problem] = check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader']
    assert problem.error and 'ADE20KDataset' in problem.problem and "('background', 'object')" in problem.problem
    assert "type='BaseSegDataset'" in problem.valid and "img_suffix='.jpg'" in problem.valid
    assert 'reduce_zero_label=True' in problem.valid


def test_coco_categories_without_an_instance_are_a_note(tmp_path):
    """Detection: the classes of metainfo that no parsed instance holds. Reference: the category names of the
    annotation file's annotations."""
    generate('coco', tmp_path, num_train=4, num_val=1, size=32, seed=0)
    content = json.loads((tmp_path / 'coco' / 'annotations' / 'instances_train2017.json').read_text())
    names = {c['id']: c['name'] for c in content['categories']}
    used = {names[a['category_id']] for a in content['annotations']}
    cfg = with_data_root(DET_DEMO, tmp_path / 'coco')
    classes = cfg.train_dataloader.dataset.get('metainfo', {}).get('classes') or tuple(names.values())
    absent = [c for c in classes if c not in used]
    assert 0 < len(absent) < len(classes) - 1
    init_default_scope('mmdet')
    [note] = check_config_data(cfg, ('train_dataloader', ))['train_dataloader']
    assert note.where == CLASSES and not note.error
    assert note.problem.startswith(f"{len(absent)} of its {len(classes)} classes never occur in the split's "
                                   f"instances: class {classes.index(absent[0])} {absent[0]!r}")
    assert 'names the annotation file' in note.valid


CLS_DEMO = ROOT / 'configs/classification/demo/pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px.py'


def _imagenet(tmp_path: Path, ann_file: bool = False):
    """A generated ImageNet-format copy and the classification demo's config reading it (its class folders, or
    with ``ann_file`` its ``meta/{train,val}.txt`` as the ImageNet-1K configs read them)."""
    from mmengine.config import Config
    generate('imagenet', tmp_path, num_train=20, num_val=5, size=32, seed=0)
    root = tmp_path / 'imagenet'
    cfg = Config.fromfile(str(CLS_DEMO))
    classes = tuple(sorted(p.name for p in (root / 'train').iterdir()))
    for loader, split in (('train_dataloader', 'train'), ('val_dataloader', 'val')):
        cfg[loader].dataset.data_root = str(root)
        if ann_file:
            cfg[loader].dataset.update(ann_file=f'meta/{split}.txt', metainfo=dict(classes=classes))
    init_default_scope('mmpretrain')
    return cfg, root


def test_classification_images_the_loader_cannot_decode_are_errors_naming_them(tmp_path):
    # A text file named .JPEG, a 0-byte .JPEG and one cut in half: mmpretrain's loader fails on each (training
    # stopped at the first), the check listed none. Reference: OpenCV, the decoder of LoadImageFromFile.
    cfg, root = _imagenet(tmp_path)
    images = sorted((root / 'train').rglob('*.JPEG'))
    text, empty, cut = images[1], images[6], images[13]
    text.write_text('not an image\n')
    empty.write_bytes(b'')
    damage_image(cut, 'truncated jpeg')
    for path in (text, empty, cut):
        try:
            decoded = mmcv.imread(str(path))
        except cv2.error:  # OpenCV refuses an empty buffer
            decoded = None
        assert decoded is None
    problems = samples(check_config_data(cfg, ('train_dataloader', 'val_dataloader'), workers=1)['train_dataloader'])
    assert sorted(p.file for p in problems) == sorted(map(str, (text, empty, cut))) and all(p.error for p in problems)
    assert all(p.problem.startswith('cannot be read as an image') for p in problems)


def test_classification_labels_must_be_classes_and_agree_with_the_class_folders(tmp_path):
    cfg, root = _imagenet(tmp_path, ann_file=True)
    assert samples(check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader']) == []
    meta = root / 'meta' / 'train.txt'
    lines = meta.read_text().splitlines()
    swapped = next(i for i, line in enumerate(lines) if line.split(' ')[1] == '1')
    lines[swapped] = lines[swapped].rsplit(' ', 1)[0] + ' 2'  # a class-1 image labelled 2
    lines[0] = lines[0].rsplit(' ', 1)[0] + ' 7'  # label 7 of 5 classes
    meta.write_text('\n'.join(lines) + '\n')
    problems = samples(check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader'])
    by_problem = {p.problem: p for p in problems}
    [out_of_range] = [p for p in problems if p.problem == 'has label 7, not a class of the 5']
    assert out_of_range.file.endswith(lines[0].split(' ')[0]) and out_of_range.valid.startswith('a label in 0..4')
    folder = lines[swapped].split('/')[0]
    assert f"class folder {folder!r} holds images of 2 labels (1..2)" in by_problem
    assert any(p.startswith('label 2 is given to images of 2 class folders') for p in by_problem)
    assert f"1 class folders hold another class's label: {folder!r} has label 2" in ''.join(by_problem)
    assert len(problems) == 4  # label 7 is named once, as no class


@pytest.mark.parametrize('setting,value', [('decode_head', 20)])
def test_a_segmentation_head_of_other_classes_than_the_data_is_named_with_both_settings(ade20k, setting, value):
    # mmseg's loss fails on it with a bare `IndexError: Target 36 is out of bounds`.
    cfg = with_data_root(SEG_DEMO, ade20k)
    cfg.model[setting].num_classes = value
    found = check_config_data(cfg, ('train_dataloader', ), workers=1)['train_dataloader']
    [problem] = [p for p in found if p.file.startswith('model.')]
    from projects.lisa.data_checks.dataset_loading import load_dataset
    dataset, _ = load_dataset(cfg.train_dataloader.dataset)
    classes = dataset.metainfo['classes']
    assert problem.error and problem.file == f'model.{setting}.num_classes={value}'
    assert f'the model predicts {value} classes but train_dataloader.dataset (ADE20KDataset) has {len(classes)}' in \
        problem.problem
    held = sorted({int(v) - 1 for p in (ade20k / 'annotations' / 'training').iterdir()
                   for v in np.unique(np.asarray(Image.open(p))) if 0 < v < 255})  # reduce_zero_label
    beyond = [c for c in held if c >= value]
    assert f'class ids up to {beyond[-1]} (e.g. {beyond[0]} {classes[beyond[0]]!r})' in problem.problem
    assert problem.valid.startswith(f'model.{setting}.num_classes={len(classes)}, or a dataset of {value} classes')


def test_detection_and_classification_heads_of_other_classes_are_named(tmp_path):
    generate('coco', tmp_path, num_train=2, num_val=1, size=32, seed=0)
    det = with_data_root(DET_DEMO, tmp_path / 'coco')
    det.model.roi_head.bbox_head.num_classes = det.model.roi_head.mask_head.num_classes = 20
    init_default_scope('mmdet')
    found = check_config_data(det, ('train_dataloader', ), workers=1)['train_dataloader']
    assert sorted(p.file for p in found if p.file.startswith('model.')) == [
        'model.roi_head.bbox_head.num_classes=20', 'model.roi_head.mask_head.num_classes=20']
    cls, _ = _imagenet(tmp_path / 'cls')
    cls.model.head.num_classes = 3
    [problem] = [p for p in check_config_data(cls, ('train_dataloader', ), workers=1)['train_dataloader']
                 if p.file.startswith('model.')]
    assert problem.file == 'model.head.num_classes=3' and 'has 5' in problem.problem
    assert 'class ids up to 4 (e.g. 3' in problem.problem


def test_a_coco_annotation_file_cut_short_is_named(tmp_path):
    generate('coco', tmp_path, num_train=2, num_val=1, size=32, seed=0)
    ann_file = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    text = ann_file.read_text()
    ann_file.write_text(text[:len(text) // 2])
    with pytest.raises(json.JSONDecodeError):
        json.loads(ann_file.read_text())  # the parser names no file
    init_default_scope('mmdet')
    [problem] = check_config_data(with_data_root(DET_DEMO, tmp_path / 'coco'), ('train_dataloader', ))[
        'train_dataloader']
    assert problem.file == str(ann_file) and problem.error
    assert problem.problem.startswith('is not valid JSON (JSONDecodeError') and 'cut short' in problem.problem
    assert problem.valid.startswith('a complete JSON annotation file')


def test_coco_annotations_of_no_image_of_the_file_are_a_note(tmp_path):
    # pycocotools indexes them under an image that mmdet never asks for: they are dropped.
    generate('coco', tmp_path, num_train=2, num_val=1, size=32, seed=0)
    ann_file = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    content = json.loads(ann_file.read_text())
    orphan = content['annotations'][-1]
    orphan['image_id'] = 999
    ann_file.write_text(json.dumps(content))
    init_default_scope('mmdet')
    found = check_config_data(with_data_root(DET_DEMO, tmp_path / 'coco'), ('train_dataloader', ))[
        'train_dataloader']
    [note] = [p for p in samples(found) if 'image_id' in p.problem]
    assert not note.error and note.file == str(ann_file)
    assert note.problem == f'1 annotations refer to an image_id that no image of the file has: annotation id ' \
                           f'{orphan["id"]} (image_id 999)'
