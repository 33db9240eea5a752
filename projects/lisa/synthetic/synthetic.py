"""Small synthetic datasets in the on-disk formats of ADE20K, COCO and ImageNet.

The files are the real formats, read by the libraries' own dataset classes
with their default settings and base-config paths under ``--out data``:

- ADE20K (mmseg ``ADE20KDataset``, ``data/ade/ADEChallengeData2016``):
  ``images/{training,validation}/ADE_{train,val}_%08d.jpg`` and single-channel
  uint8 PNG label maps ``annotations/{training,validation}/*.png`` holding
  ADE20K ids: 0 is unlabelled ("other", ignored under ``reduce_zero_label``),
  1..150 the classes. A scene is a textured wall, often a floor, and 1-4
  objects of :data:`ADE20K_CLASSES`; as in ADE20K, object outlines are left
  unlabelled (0).
- COCO (mmdet ``CocoDataset`` / ``CocoMetric``, ``data/coco``):
  ``{train2017,val2017}/%012d.jpg`` and ``annotations/instances_{split}.json``
  with the 80 categories of COCO 2017 (real ids and names). Objects of
  :data:`COCO_LOOKS` carry polygons, except donuts (rings, which have a hole):
  compressed RLE. A cluster of small balls is one ``iscrowd=1`` annotation
  with an uncompressed RLE, as COCO annotates crowds.
- ImageNet (mmpretrain ``ImageNet`` / ``CustomDataset``, ``data/imagenet``):
  ``{train,val}/<class>/<class>_%05d.JPEG``, one object per image, and
  ``meta/{train,val}.txt`` lines ``<class>/<file> <label>`` with labels
  indexing the sorted class names, i.e. the folder order mmpretrain assigns.

Every image is drawn from its own random stream keyed by (seed, dataset,
split, index), so a split's images do not change when other counts do.
ADE20K and COCO images are ``size`` high and 1-1.5x as wide; ImageNet images
are ``size`` square.

Rerunning with the same parameters skips a dataset; other parameters replace
it. A dataset is written into a temporary folder and moved into place, and
only a folder this module wrote (it holds :data:`MARKER`) is ever replaced.
"""
from __future__ import annotations

import json
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from pycocotools import mask as mask_utils
from scipy.ndimage import binary_erosion

from .scenes import Appearance, Canvas, striped

FORMAT_VERSION = 1
MARKER = '.synthetic.json'
"""File in each generated dataset root holding the parameters that made it."""
MIN_SIZE = 32
SPLITS = ('train', 'val')
JPEG_QUALITY = 95

# ADE20K ids (1-based, 0 = unlabelled) and names as in mmseg's ADE20KDataset.
ADE20K_WALL, ADE20K_FLOOR, ADE20K_UNLABELLED = 1, 4, 0
ADE20K_CLASSES: dict[int, str] = {1: 'wall', 4: 'floor', 23: 'painting', 37: 'lamp',
                                  120: 'ball', 150: 'flag'}
ADE20K_WALL_COLOUR, ADE20K_FLOOR_COLOUR = (180, 172, 160), (125, 80, 45)
ADE20K_LOOKS: dict[int, Appearance] = {
    23: Appearance('rectangle', (35, 75, 190), aspect=(0.6, 1.6)),
    37: Appearance('diamond', (235, 215, 60), aspect=(0.7, 1.0)),
    120: Appearance('disc', (235, 135, 25)),
    150: Appearance('triangle', (200, 30, 45)),
}

_COCO_SUPERCATEGORIES = (
    ('person', ('person',)),
    ('vehicle', ('bicycle', 'car', 'motorcycle', 'airplane', 'bus', 'train', 'truck', 'boat')),
    ('outdoor', ('traffic light', 'fire hydrant', 'stop sign', 'parking meter', 'bench')),
    ('animal', ('bird', 'cat', 'dog', 'horse', 'sheep', 'cow', 'elephant', 'bear', 'zebra',
                'giraffe')),
    ('accessory', ('backpack', 'umbrella', 'handbag', 'tie', 'suitcase')),
    ('sports', ('frisbee', 'skis', 'snowboard', 'sports ball', 'kite', 'baseball bat',
                'baseball glove', 'skateboard', 'surfboard', 'tennis racket')),
    ('kitchen', ('bottle', 'wine glass', 'cup', 'fork', 'knife', 'spoon', 'bowl')),
    ('food', ('banana', 'apple', 'sandwich', 'orange', 'broccoli', 'carrot', 'hot dog', 'pizza',
              'donut', 'cake')),
    ('furniture', ('chair', 'couch', 'potted plant', 'bed', 'dining table', 'toilet')),
    ('electronic', ('tv', 'laptop', 'mouse', 'remote', 'keyboard', 'cell phone')),
    ('appliance', ('microwave', 'oven', 'toaster', 'sink', 'refrigerator')),
    ('indoor', ('book', 'clock', 'vase', 'scissors', 'teddy bear', 'hair drier', 'toothbrush')),
)
# COCO 2017 numbers its 80 categories 1..90, skipping the ids of 10 classes of the
# COCO paper that were never released (street sign, hat, shoe, eye glasses, plate,
# mirror, window, desk, door, blender).
_COCO_UNRELEASED_IDS = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
COCO_CATEGORIES: list[dict] = [
    dict(id=cat_id, name=name, supercategory=supercategory)
    for cat_id, (supercategory, name) in zip(
        (i for i in range(1, 91) if i not in _COCO_UNRELEASED_IDS),
        ((sup, name) for sup, names in _COCO_SUPERCATEGORIES for name in names))
]
COCO_SPORTS_BALL = 37
COCO_LOOKS: dict[int, Appearance] = {
    13: Appearance('octagon', (200, 25, 35)),                  # stop sign
    37: Appearance('disc', (235, 135, 25)),                    # sports ball
    38: Appearance('triangle', (40, 190, 200)),                # kite
    60: Appearance('ring', (220, 110, 170)),                   # donut (pink icing)
    84: Appearance('rectangle', (40, 70, 180), (0.6, 1.6)),    # book
}

IMAGENET_LOOKS: dict[str, Appearance] = {
    'blue_square': Appearance('rectangle', (40, 70, 200)),
    'green_triangle': Appearance('triangle', (40, 170, 60)),
    'orange_disc': Appearance('disc', (235, 135, 25)),
    'purple_ring': Appearance('ring', (140, 50, 170)),
    'red_cross': Appearance('cross', (200, 30, 40)),
}
IMAGENET_CLASSES = tuple(sorted(IMAGENET_LOOKS))
"""Class names in label order (mmpretrain sorts class folders by name)."""

_RngFor = Callable[[int], np.random.Generator]  # image index -> its random stream


@dataclass(frozen=True)
class Generated:
    """What :func:`generate` did: ``action`` is 'created', 'replaced' or 'skipped'."""

    dataset: str
    root: Path
    action: str
    params: dict
    seconds: float

    def __str__(self) -> str:
        p = self.params
        return (f"{self.dataset}: {self.action} {self.root} ({p['num_train']} train, "
                f"{p['num_val']} val, size {p['size']}, seed {p['seed']}) in {self.seconds:.1f} s")


def _landscape(rng: np.random.Generator, size: int) -> tuple[int, int]:
    return size, int(round(size * rng.uniform(1.0, 1.5)))


def _random_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A greyish striped background of random brightness, tint and stripe direction."""
    colour = tuple(rng.uniform(70, 190) + rng.uniform(-20, 20, 3))
    return striped(rng, height, width, colour, contrast=0.12, period=(5, 16), noise=8)


def ade20k_scene(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw one ADE20K image ``(H, W, 3)`` uint8 RGB and its label map ``(H, W)`` uint8."""
    height, width = _landscape(rng, size)
    canvas = Canvas(rng, striped(rng, height, width, ADE20K_WALL_COLOUR, contrast=0.08,
                                 period=(6, 14), noise=6))
    label = np.full((height, width), ADE20K_WALL, np.uint8)
    if rng.random() < 0.6:
        y, x = np.mgrid[:height, :width]
        horizon = rng.uniform(0.55, 0.8) * height + rng.uniform(-0.2, 0.2) * (x - width / 2)
        floor = y >= horizon
        texture = striped(rng, height, width, ADE20K_FLOOR_COLOUR, contrast=0.25, period=(4, 8),
                          noise=6)
        canvas.image[floor] = texture[floor]
        label[floor] = ADE20K_FLOOR
    ids = list(ADE20K_LOOKS)
    for _ in range(rng.integers(1, 5)):
        class_id = ids[rng.integers(len(ids))]
        drawn = canvas.add(ADE20K_LOOKS[class_id], radius=(0.08 * size, 0.2 * size))
        if drawn is not None:
            label[drawn.mask] = class_id
            label[drawn.mask & ~binary_erosion(drawn.mask)] = ADE20K_UNLABELLED
    return canvas.to_uint8(), label


def compressed_rle(mask: np.ndarray) -> dict:
    """COCO compressed RLE of a bool mask, JSON-ready (``counts`` a str)."""
    rle = mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8))
    return dict(size=rle['size'], counts=rle['counts'].decode('ascii'))


def uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO uncompressed RLE: run lengths over the column-major pixels, zeros first."""
    pixels = mask.ravel(order='F')
    ends = np.flatnonzero(pixels[1:] != pixels[:-1]) + 1
    runs = np.diff(np.concatenate([[0], ends, [pixels.size]]))
    counts = ([0] if pixels[0] else []) + runs.tolist()
    return dict(size=list(mask.shape), counts=counts)


def coco_scene(rng: np.random.Generator, size: int) -> tuple[np.ndarray, list[dict]]:
    """Draw one COCO image ``(H, W, 3)`` uint8 RGB and its objects.

    Each object is ``dict(category_id, mask, segmentation, iscrowd)``. 1-4
    objects come first (so every image has one); with probability 1/4 a crowd
    of 3-6 small balls (radius >= 2 px) follows in a free part of the image.
    """
    height, width = _landscape(rng, size)
    canvas = Canvas(rng, _random_background(rng, height, width))
    objects = []
    ids = list(COCO_LOOKS)
    for _ in range(rng.integers(1, 5)):
        category_id = ids[rng.integers(len(ids))]
        drawn = canvas.add(COCO_LOOKS[category_id], radius=(0.08 * size, 0.22 * size))
        if drawn is None:
            continue
        segmentation = (compressed_rle(drawn.mask) if drawn.polygon is None
                        else [drawn.polygon.ravel().tolist()])
        objects.append(dict(category_id=category_id, mask=drawn.mask,
                            segmentation=segmentation, iscrowd=0))
    if rng.random() < 0.25:
        side = 0.45 * size
        x0, y0 = rng.uniform(0, width - side), rng.uniform(0, height - side)
        radius = (max(2.0, 0.025 * size), max(3.0, 0.04 * size))
        balls = [canvas.add(COCO_LOOKS[COCO_SPORTS_BALL], radius,
                            within=(x0, y0, x0 + side, y0 + side))
                 for _ in range(rng.integers(3, 7))]
        masks = [ball.mask for ball in balls if ball is not None]
        if masks:
            crowd = np.logical_or.reduce(masks)
            objects.append(dict(category_id=COCO_SPORTS_BALL, mask=crowd,
                                segmentation=uncompressed_rle(crowd), iscrowd=1))
    return canvas.to_uint8(), objects


def imagenet_scene(rng: np.random.Generator, size: int, look: Appearance) -> np.ndarray:
    """Draw one ``size``-square ImageNet image, uint8 RGB, with one object of ``look``."""
    canvas = Canvas(rng, _random_background(rng, size, size))
    if canvas.add(look, radius=(0.22 * size, 0.4 * size)) is None:
        raise RuntimeError(f'no place for a {look.shape} in a {size}-px image')
    return canvas.to_uint8()


def _save_jpeg(image: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image).save(path, quality=JPEG_QUALITY)


def _write_ade20k(root: Path, split: str, count: int, size: int, rng: _RngFor) -> None:
    folder = {'train': 'training', 'val': 'validation'}[split]
    for i in range(count):
        image, label = ade20k_scene(rng(i), size)
        stem = f'ADE_{split}_{i + 1:08d}'
        _save_jpeg(image, root / 'images' / folder / f'{stem}.jpg')
        label_path = root / 'annotations' / folder / f'{stem}.png'
        label_path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(label).save(label_path)  # 2-D uint8: mode 'L'


def _write_coco(root: Path, split: str, count: int, size: int, rng: _RngFor) -> None:
    subset = f'{split}2017'
    images, annotations = [], []
    for i in range(count):
        image_id = i + 1
        image, objects = coco_scene(rng(i), size)
        file_name = f'{image_id:012d}.jpg'
        _save_jpeg(image, root / subset / file_name)
        images.append(dict(id=image_id, file_name=file_name, height=image.shape[0],
                           width=image.shape[1]))
        for obj in objects:
            rle = mask_utils.encode(np.asfortranarray(obj['mask'], dtype=np.uint8))
            annotations.append(dict(
                id=len(annotations) + 1, image_id=image_id, category_id=obj['category_id'],
                segmentation=obj['segmentation'], area=float(mask_utils.area(rle)),
                bbox=mask_utils.toBbox(rle).tolist(), iscrowd=obj['iscrowd']))
    info = dict(description=f'LiSA-mm synthetic COCO-format {subset}', version='1.0')
    content = dict(info=info, licenses=[], images=images, annotations=annotations,
                   categories=COCO_CATEGORIES)
    path = root / 'annotations' / f'instances_{subset}.json'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def _write_imagenet(root: Path, split: str, count: int, size: int, rng: _RngFor) -> None:
    lines = []
    for i in range(count):
        label = i % len(IMAGENET_CLASSES)
        name = IMAGENET_CLASSES[label]
        file_name = f'{name}/{name}_{i // len(IMAGENET_CLASSES) + 1:05d}.JPEG'
        _save_jpeg(imagenet_scene(rng(i), size, IMAGENET_LOOKS[name]), root / split / file_name)
        lines.append(f'{file_name} {label}\n')
    meta = root / 'meta' / f'{split}.txt'
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(''.join(lines))


_WRITERS: dict[str, tuple[str, Callable[[Path, str, int, int, _RngFor], None], int]] = {
    # dataset: (root under --out, split writer, least images per split)
    'ade20k': ('ade/ADEChallengeData2016', _write_ade20k, 1),
    'coco': ('coco', _write_coco, 1),
    'imagenet': ('imagenet', _write_imagenet, len(IMAGENET_CLASSES)),
}
DATASETS = tuple(_WRITERS)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f'{name} must be an integer >= {minimum}, got {value!r}')


def check_params(dataset: str, num_train: int, num_val: int, size: int, seed: int) -> None:
    """Raise ValueError naming the first argument of :func:`generate` that is invalid."""
    if dataset not in _WRITERS:
        raise ValueError(f'dataset must be one of {DATASETS}, got {dataset!r}')
    least = _WRITERS[dataset][2]
    _check_int('num_train', num_train, least)
    _check_int('num_val', num_val, least)
    _check_int('size', size, MIN_SIZE)
    _check_int('seed', seed, 0)


def generate(dataset: str, out: str | Path = 'data', num_train: int = 64, num_val: int = 16,
             size: int = 96, seed: int = 0) -> Generated:
    """Write ``dataset`` (one of :data:`DATASETS`) under ``out``, or skip it if up to date.

    Args:
        dataset: 'ade20k', 'coco' or 'imagenet'.
        out: The data folder; datasets go where the OpenMMLab base configs look
            (``ade/ADEChallengeData2016``, ``coco``, ``imagenet``).
        num_train: Training images (ImageNet: at least one per class).
        num_val: Validation images (ImageNet: at least one per class).
        size: Image height in pixels, at least :data:`MIN_SIZE`.
        seed: Non-negative seed; the same parameters give the same files.

    Raises:
        ValueError: For an unknown dataset or an invalid number.
        FileExistsError: If the target folder exists but was not written here.
    """
    check_params(dataset, num_train, num_val, size, seed)
    subdir, write, _ = _WRITERS[dataset]
    start = time.perf_counter()
    root = Path(out) / subdir
    params = dict(format_version=FORMAT_VERSION, dataset=dataset, num_train=num_train,
                  num_val=num_val, size=size, seed=seed)
    action = 'created'
    if root.exists():
        marker = root / MARKER
        if not marker.is_file():
            raise FileExistsError(f'{root} exists and was not written by generate_data '
                                  f'(no {MARKER}); refusing to replace it: move it or choose '
                                  'another output folder')
        if json.loads(marker.read_text()) == params:
            return Generated(dataset, root, 'skipped', params, time.perf_counter() - start)
        action = 'replaced'
    tmp = root.with_name(f'.{root.name}.partial')  # left over only if a run was killed
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for split, count in zip(SPLITS, (num_train, num_val)):
            key = zlib.crc32(f'{dataset}/{split}'.encode())
            write(tmp, split, count, size, lambda i, key=key: np.random.default_rng([seed, key, i]))
        (tmp / MARKER).write_text(json.dumps(params))
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return Generated(dataset, root, action, params, time.perf_counter() - start)
