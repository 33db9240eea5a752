"""The synthetic datasets are read by OpenMMLab's own dataset classes and metrics.

The references are the libraries that consume the real datasets: mmseg's
``ADE20KDataset`` pipeline, mmdet's ``CocoDataset`` / ``CocoMetric``,
pycocotools and mmpretrain's ``CustomDataset`` / ``ImageNet``; the image
pixels themselves check that annotations sit on the drawn objects.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mmcv.transforms import LoadImageFromFile
from PIL import Image
from pycocotools.coco import COCO
from scipy.ndimage import binary_dilation, binary_erosion

from projects.lisa.synthetic import ADE20K_CLASSES, IMAGENET_CLASSES, generate
from projects.lisa.synthetic.synthetic import (
    ADE20K_FLOOR,
    ADE20K_FLOOR_COLOUR,
    ADE20K_LOOKS,
    ADE20K_WALL,
    ADE20K_WALL_COLOUR,
    COCO_LOOKS,
    IMAGENET_LOOKS,
    MARKER,
)

ROOT = Path(__file__).resolve().parents[1]
COUNTS = dict(num_train=12, num_val=6, size=64, seed=0)


@pytest.fixture(scope='module')
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp('data')
    for dataset in ('ade20k', 'coco', 'imagenet'):
        generate(dataset, out, **COUNTS)
    return out


def colour_distance(pixels: np.ndarray, colour) -> np.ndarray:
    """Distance of RGB ``pixels (..., 3)`` to ``colour`` at the nearest brightness in 0.85-1.15."""
    c = np.asarray(colour, dtype=float)
    brightness = np.clip(pixels @ c / (c @ c), 0.85, 1.15)
    return np.linalg.norm(pixels - brightness[..., None] * c, axis=-1)


def rgb(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert('RGB'), dtype=float)


# ADE20K ---------------------------------------------------------------------------------------

def test_ade20k_class_ids_name_the_same_classes_as_mmseg():
    from mmseg.datasets import ADE20KDataset
    classes = ADE20KDataset.METAINFO['classes']
    assert {i: classes[i - 1].strip() for i in ADE20K_CLASSES} == ADE20K_CLASSES


@pytest.mark.parametrize('split,folder', [('train', 'training'), ('val', 'validation')])
def test_ade20k_dataset_loads_images_with_matching_zero_reduced_label_maps(data, split, folder):
    from mmseg.datasets import ADE20KDataset
    from mmseg.datasets.transforms import LoadAnnotations
    root = data / 'ade' / 'ADEChallengeData2016'
    dataset = ADE20KDataset(
        data_root=str(root),
        data_prefix=dict(img_path=f'images/{folder}', seg_map_path=f'annotations/{folder}'),
        pipeline=[LoadImageFromFile(), LoadAnnotations(reduce_zero_label=True)])
    assert len(dataset) == COUNTS[f'num_{split}']
    raw_values = set()
    for i in range(len(dataset)):
        result = dataset[i]
        img_path, seg_path = Path(result['img_path']), Path(result['seg_map_path'])
        assert img_path.stem == seg_path.stem and img_path.stem.startswith(f'ADE_{split}_')
        raw = np.asarray(Image.open(seg_path))
        assert raw.dtype == np.uint8 and raw.ndim == 2
        assert result['img'].shape == (*raw.shape, 3)
        assert raw.shape[0] == COUNTS['size']
        # reduce_zero_label: 0 (unlabelled) -> 255 (ignored), id k -> class index k - 1
        np.testing.assert_array_equal(result['gt_seg_map'],
                                      np.where(raw == 0, 255, raw.astype(int) - 1))
        raw_values |= set(np.unique(raw).tolist())
    assert raw_values <= {0, *ADE20K_CLASSES}
    assert {0, ADE20K_WALL} <= raw_values and len(raw_values) >= 4


def test_ade20k_labelled_regions_have_their_class_colour(data):
    colours = {ADE20K_WALL: ADE20K_WALL_COLOUR, ADE20K_FLOOR: ADE20K_FLOOR_COLOUR,
               **{i: look.colour for i, look in ADE20K_LOOKS.items()}}
    root = data / 'ade' / 'ADEChallengeData2016'
    checked = set()
    for seg_path in sorted((root / 'annotations' / 'training').glob('*.png')):
        label = np.asarray(Image.open(seg_path))
        image = rgb(root / 'images' / 'training' / f'{seg_path.stem}.jpg')
        for class_id in set(np.unique(label).tolist()) - {0}:
            inner = binary_erosion(label == class_id)
            if inner.sum() < 10:
                continue
            mean = image[inner].mean(0)
            nearest = min(colours, key=lambda i: colour_distance(mean, colours[i]))
            assert nearest == class_id, (seg_path.name, class_id, mean)
            checked.add(class_id)
    assert checked == set(ADE20K_CLASSES)


# COCO -----------------------------------------------------------------------------------------

def coco_api(data: Path, split: str) -> COCO:
    return COCO(str(data / 'coco' / 'annotations' / f'instances_{split}2017.json'))


def test_coco_categories_are_the_80_of_coco_2017_with_their_real_ids(data):
    from mmdet.datasets import CocoDataset
    categories = json.loads((data / 'coco/annotations/instances_val2017.json').read_text())[
        'categories']
    assert [c['name'] for c in categories] == list(CocoDataset.METAINFO['classes'])
    ids = {c['name']: c['id'] for c in categories}
    assert (ids['person'], ids['stop sign'], ids['sports ball'], ids['donut'], ids['book'],
            ids['toothbrush']) == (1, 13, 37, 60, 84, 90)
    assert len(set(ids.values())) == 80 and max(ids.values()) == 90


@pytest.mark.parametrize('split', ['train', 'val'])
def test_coco_dataset_loads_every_instance_with_its_box_mask_and_crowd_flag(data, split):
    from mmdet.datasets import CocoDataset
    from mmdet.datasets.transforms import LoadAnnotations
    dataset = CocoDataset(
        data_root=str(data / 'coco'), ann_file=f'annotations/instances_{split}2017.json',
        data_prefix=dict(img=f'{split}2017/'), test_mode=True,
        pipeline=[LoadImageFromFile(), LoadAnnotations(with_bbox=True, with_mask=True)])
    coco = coco_api(data, split)
    classes = CocoDataset.METAINFO['classes']
    assert len(dataset) == COUNTS[f'num_{split}']
    for i in range(len(dataset)):
        result = dataset[i]
        info = coco.imgs[result['img_id']]
        anns = coco.loadAnns(coco.getAnnIds(imgIds=info['id']))
        assert anns and result['img'].shape == (info['height'], info['width'], 3)
        masks = result['gt_masks'].masks
        assert masks.shape == (len(anns), info['height'], info['width'])
        for j, ann in enumerate(anns):
            np.testing.assert_array_equal(masks[j], coco.annToMask(ann))
            x, y, w, h = ann['bbox']
            np.testing.assert_allclose(result['gt_bboxes'].tensor[j].numpy(), [x, y, x + w, y + h])
            assert classes[result['gt_bboxes_labels'][j]] == coco.cats[ann['category_id']]['name']
            assert result['gt_ignore_flags'][j] == bool(ann['iscrowd'])


def test_coco_segmentations_decode_to_the_drawn_objects(data):
    coco = coco_api(data, 'train')
    kinds = set()
    for ann in coco.dataset['annotations']:
        info = coco.imgs[ann['image_id']]
        mask = coco.annToMask(ann).astype(bool)
        segmentation = ann['segmentation']
        kind = ('polygon' if isinstance(segmentation, list) else
                'uncompressed RLE' if isinstance(segmentation['counts'], list) else 'RLE')
        kinds.add((kind, ann['iscrowd']))
        assert mask.sum() == ann['area'] > 0
        ys, xs = np.nonzero(mask)
        assert ann['bbox'] == [xs.min(), ys.min(), xs.max() - xs.min() + 1,
                               ys.max() - ys.min() + 1]
        if kind == 'polygon':  # shoelace area; rasterisation differs along the outline only
            x, y = np.asarray(segmentation[0]).reshape(-1, 2).T
            area = 0.5 * abs(x @ np.roll(y, 1) - y @ np.roll(x, 1))
            perimeter = np.hypot(x - np.roll(x, 1), y - np.roll(y, 1)).sum()
            assert abs(area - mask.sum()) < 0.25 * perimeter
        if ann['iscrowd']:
            continue  # balls of a crowd are too small for colour statistics after JPEG
        image = rgb(data / 'coco' / 'train2017' / info['file_name'])
        colour = COCO_LOOKS[ann['category_id']].colour
        inside = colour_distance(image[binary_erosion(mask)].mean(0), colour)
        ring = binary_dilation(mask, iterations=2) & ~binary_dilation(mask)
        outside = colour_distance(image[ring].mean(0), colour)
        assert inside < 25 and outside > inside + 10, (ann['id'], inside, outside)
    assert kinds == {('polygon', 0), ('RLE', 0), ('uncompressed RLE', 1)}


def coco_metric(data: Path, shift: int) -> dict:
    """CocoMetric on val with each non-crowd ground-truth instance, moved ``shift`` px right,
    as a prediction of score 1."""
    from mmdet.datasets import CocoDataset
    from mmdet.evaluation import CocoMetric
    ann_file = data / 'coco' / 'annotations' / 'instances_val2017.json'
    coco = coco_api(data, 'val')
    classes = CocoDataset.METAINFO['classes']
    metric = CocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'])
    metric.dataset_meta = dict(classes=classes)
    for img_id, info in coco.imgs.items():
        anns = [a for a in coco.loadAnns(coco.getAnnIds(imgIds=img_id)) if not a['iscrowd']]
        masks = np.roll(np.stack([coco.annToMask(a) for a in anns]), shift, axis=2)
        boxes = [[x + shift, y, x + shift + w, y + h] for x, y, w, h in (a['bbox'] for a in anns)]
        labels = [classes.index(coco.cats[a['category_id']]['name']) for a in anns]
        pred = dict(bboxes=torch.tensor(boxes), scores=torch.ones(len(anns)),
                    labels=torch.tensor(labels), masks=torch.from_numpy(masks).bool())
        metric.process({}, [dict(img_id=img_id, ori_shape=(info['height'], info['width']),
                                 pred_instances=pred)])
    return metric.evaluate(size=len(coco.imgs))


def test_coco_metric_scores_the_ground_truth_as_perfect(data):
    result = coco_metric(data, shift=0)
    assert result['coco/bbox_mAP'] == 1.0 and result['coco/segm_mAP'] == 1.0


def test_coco_metric_scores_shifted_ground_truth_below_perfect(data):
    result = coco_metric(data, shift=3)
    assert result['coco/bbox_mAP'] < 0.9 and result['coco/segm_mAP'] < 0.9


# ImageNet -------------------------------------------------------------------------------------

@pytest.mark.parametrize('split', ['train', 'val'])
def test_imagenet_class_folders_and_meta_files_give_the_same_labels(data, split):
    from mmpretrain.datasets import CustomDataset, ImageNet
    root = data / 'imagenet'
    folders = CustomDataset(data_root=str(root), data_prefix=split)
    assert folders.metainfo['classes'] == IMAGENET_CLASSES
    meta = ImageNet(data_root=str(root), split=split, metainfo=dict(classes=IMAGENET_CLASSES))
    assert meta.ann_file.endswith(f'meta/{split}.txt')

    def labels(dataset):
        return {info['img_path']: info['gt_label'] for info in dataset.load_data_list()}

    by_folder = labels(folders)
    assert by_folder == labels(meta) and len(by_folder) == COUNTS[f'num_{split}']
    assert set(by_folder.values()) == set(range(len(IMAGENET_CLASSES)))
    for path, label in by_folder.items():
        assert IMAGENET_CLASSES[label] == Path(path).parent.name


def test_imagenet_images_show_an_object_of_their_class_colour(data):
    for path in sorted((data / 'imagenet' / 'train').glob('*/*.JPEG')):
        image = rgb(path)
        assert image.shape == (COUNTS['size'], COUNTS['size'], 3)
        share = {name: (colour_distance(image, look.colour) < 30).mean()
                 for name, look in IMAGENET_LOOKS.items()}
        assert max(share, key=share.get) == path.parent.name and share[path.parent.name] > 0.05


# Generation -----------------------------------------------------------------------------------

def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob('*'))
            if p.is_file()}


def test_same_seed_gives_identical_files_and_another_seed_other_images(tmp_path):
    args = dict(num_train=3, num_val=2, size=48)
    first, again, other = (files(generate('coco', tmp_path / name, seed=seed, **args).root)
                           for name, seed in (('a', 7), ('b', 7), ('c', 8)))
    assert first == again
    images = [name for name in first if name.endswith('.jpg')]
    assert len(images) == 5 and all(first[name] != other[name] for name in images)


def test_a_split_does_not_change_when_the_other_counts_change(tmp_path):
    small = files(generate('ade20k', tmp_path / 'a', num_train=2, num_val=2, size=48).root)
    large = files(generate('ade20k', tmp_path / 'b', num_train=4, num_val=2, size=48).root)
    shared = set(small) - {MARKER}
    assert shared < set(large) and all(small[name] == large[name] for name in shared)


def test_rerun_skips_same_parameters_and_replaces_other_ones_cleanly(tmp_path):
    args = dict(num_val=5, size=32)
    created = generate('imagenet', tmp_path, num_train=10, **args)
    stamp = (created.root / MARKER).stat().st_mtime_ns
    skipped = generate('imagenet', tmp_path, num_train=10, **args)
    assert (created.action, skipped.action) == ('created', 'skipped')
    assert (created.root / MARKER).stat().st_mtime_ns == stamp
    replaced = generate('imagenet', tmp_path, num_train=5, **args)
    assert replaced.action == 'replaced'
    assert len(list((replaced.root / 'train').glob('*/*.JPEG'))) == 5
    assert len((replaced.root / 'meta' / 'train.txt').read_text().splitlines()) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ['imagenet']  # no temporary left


def test_refuses_to_replace_a_folder_it_did_not_write(tmp_path):
    foreign = tmp_path / 'coco' / 'annotations' / 'instances_train2017.json'
    foreign.parent.mkdir(parents=True)
    foreign.write_text('{}')
    with pytest.raises(FileExistsError, match='coco.*not written by generate_data'):
        generate('coco', tmp_path)
    assert foreign.read_text() == '{}'


@pytest.mark.parametrize('dataset,kwargs,message', [
    ('coco', dict(num_train=-3), 'num_train must be an integer >= 1, got -3'),
    ('ade20k', dict(num_val=0), 'num_val must be an integer >= 1, got 0'),
    ('imagenet', dict(num_train=4), 'num_train must be an integer >= 5, got 4'),
    ('coco', dict(size=16), 'size must be an integer >= 32, got 16'),
    ('coco', dict(num_train=2.5), 'num_train must be an integer >= 1, got 2.5'),
    ('ade20k', dict(seed=-1), 'seed must be an integer >= 0, got -1'),
    ('cityscapes', dict(), "dataset must be one of .*, got 'cityscapes'"),
])
def test_invalid_arguments_raise_naming_the_value(tmp_path, dataset, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(dataset, tmp_path, **kwargs)
    assert not any(tmp_path.iterdir())


# Command line ---------------------------------------------------------------------------------

@pytest.fixture(scope='module')
def cli():
    from tools import generate_data as module
    return module.main


def test_cli_writes_all_datasets_then_reports_them_up_to_date(tmp_path, cli, capsys):
    argv = ['all', '--out', str(tmp_path), '--num-train', '5', '--num-val', '5', '--size', '32']
    cli(argv)
    first = capsys.readouterr().out.splitlines()
    cli(argv)
    second = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in first] == [
        ['ade20k:', 'created'], ['coco:', 'created'], ['imagenet:', 'created']]
    assert [line.split()[1] for line in second] == ['skipped'] * 3
    assert (tmp_path / 'ade' / 'ADEChallengeData2016' / 'images' / 'validation').is_dir()
    assert (tmp_path / 'coco' / 'annotations' / 'instances_val2017.json').is_file()
    assert (tmp_path / 'imagenet' / 'meta' / 'val.txt').is_file()


def test_cli_rejects_bad_values_before_writing_anything(tmp_path, cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(['all', '--out', str(tmp_path), '--num-train', '3'])
    assert exit_info.value.code == 2
    assert 'imagenet: num_train must be an integer >= 5, got 3' in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
