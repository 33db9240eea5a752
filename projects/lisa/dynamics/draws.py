"""The study's datasets, one folder per draw, in ADE20K's layout (``images/{training,validation}/*.jpg``,
``annotations/{training,validation}/*.png``, 0 unlabelled and ignored, classes from 1), so that mmseg's
``ADE20KDataset`` reads both:

- ``generated``: the project's synthetic ADE20K (:mod:`projects.lisa.synthetic`), drawn with the draw's seed;
- ``nuclei``: a real, labelled fluorescence image of cell nuclei, ``stardist/data/images/{img2d,mask2d}.tif``
  of the ``stardist`` wheel on PyPI (BSD-3-Clause; the image comes from the 2018 Data Science Bowl, Caicedo et
  al., Nature Methods 2019): 512 x 512 pixels, uint16, 125 labelled nuclei (20 % of the pixels). It is cut
  into 16 tiles of 128 px; draw ``r`` holds out 4 of them, chosen by seed ``r``, and trains on the other 12.
  Labels: 1 background, 2 nucleus (the instance masks merged). The image is scaled to 8 bits between its
  1st and 99.8th percentiles, as stardist normalises it, and repeated into 3 channels.

The wheel is read as a zip archive (stardist itself is not installed); :func:`stardist_wheel` downloads it
with ``pip download`` into the cache folder once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image

from ..synthetic import generate

STARDIST = 'stardist==0.9.2'
NUCLEI_FILES = ('stardist/data/images/img2d.tif', 'stardist/data/images/mask2d.tif')
TILE, HELD_OUT = 128, 4
NUCLEI_CLASSES = ('background', 'nucleus')
GENERATED = dict(num_train=96, num_val=24, size=96)
"""The demo's synthetic ADE20K (``tools/demo.py``), drawn once per run."""
ROOT = 'ade/ADEChallengeData2016'
DATASETS = ('nuclei', 'generated')


def stardist_wheel(cache: Path) -> Path:
    """The stardist wheel in ``cache``, downloaded (without its dependencies) when missing."""
    found = sorted(cache.glob('stardist-*.whl'))
    if not found:
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, '-m', 'pip', 'download', '--no-deps', '--only-binary=:all:',
                               '--dest', str(cache), STARDIST], capture_output=True, text=True)
        found = sorted(cache.glob('stardist-*.whl'))
        if done.returncode or not found:
            raise RuntimeError(f'pip download {STARDIST} failed (exit {done.returncode}): {done.stderr[-2000:]}\n'
                               f'put the wheel into {cache} by hand, or pass --wheel')
    return found[-1]


def read_nuclei(wheel: Path) -> tuple[np.ndarray, np.ndarray]:
    """The image (uint8, H x W) and its labels (1 background, 2 nucleus) from the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [n for n in NUCLEI_FILES if n not in names]
        if missing:
            raise ValueError(f'{wheel} holds no {", ".join(missing)}: expected a wheel of {STARDIST}')
        image, mask = (np.array(Image.open(BytesIO(archive.read(n)))) for n in NUCLEI_FILES)
    if image.shape != mask.shape or image.ndim != 2:
        raise ValueError(f'{wheel}: image {image.shape} and mask {mask.shape} must be one 2-D size')
    low, high = np.percentile(image, (1, 99.8))
    scaled = np.clip((image.astype(np.float64) - low) / max(high - low, 1e-9), 0, 1)
    return np.round(scaled * 255).astype(np.uint8), np.where(mask > 0, 2, 1).astype(np.uint8)


def held_out(draw: int, tiles: int) -> list[int]:
    """The tiles (row-major indices) that draw ``draw`` holds out for validation."""
    return sorted(np.random.default_rng(draw).permutation(tiles)[:HELD_OUT].tolist())


def write_nuclei(out: Path, draw: int, wheel: Path) -> Path:
    """Draw ``draw`` of the nuclei tiles under ``out/ade/ADEChallengeData2016``; skipped when written."""
    root = out / ROOT
    marker = root / '.nuclei.json'
    spec = dict(wheel=wheel.name, draw=draw, tile=TILE, held_out=HELD_OUT)
    if marker.is_file() and json.loads(marker.read_text()) == spec:
        return root
    image, labels = read_nuclei(wheel)
    rows, cols = image.shape[0] // TILE, image.shape[1] // TILE
    val = set(held_out(draw, rows * cols))
    for index in range(rows * cols):
        r, c = divmod(index, cols)
        window = np.s_[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE]
        split = 'validation' if index in val else 'training'
        for folder, array, suffix in (('images', np.repeat(image[window][..., None], 3, -1), 'jpg'),
                                      ('annotations', labels[window], 'png')):
            path = root / folder / split / f'tile_{index:02d}.{suffix}'
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(array).save(path, **({'quality': 95} if suffix == 'jpg' else {}))
    marker.write_text(json.dumps(spec))
    return root


def write_draw(dataset: str, out: Path, draw: int, wheel: Path | None = None) -> Path:
    """The data root of draw ``draw`` of ``dataset`` (one of :data:`DATASETS`) under ``out``."""
    if dataset == 'nuclei':
        if wheel is None:
            raise ValueError('the nuclei dataset needs the stardist wheel (wheel=...)')
        return write_nuclei(out, draw, wheel)
    if dataset == 'generated':
        return Path(generate('ade20k', out, seed=draw, **GENERATED).root)
    raise ValueError(f'dataset {dataset!r} is not one of {DATASETS}')
