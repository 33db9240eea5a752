"""Build mini-ImageNet (the ablations' dataset) from an ImageNet-1K folder, as symlinks.

    python tools/prepare_mini_imagenet.py IMAGENET [--out data/mini-imagenet]

IMAGENET is the ImageNet-1K root of the mm configs (``IMAGENET/train/<wnid>/*.JPEG``). The
result is the folder-per-class layout that configs/_base_/datasets/mini_imagenet.py reads:

    <out>/train/<wnid>/<file>   500 images per class
    <out>/val/<wnid>/<file>     100 images per class

for the 100 classes of ``projects.lisa.datasets.mini_imagenet`` (its docstring gives the split).
The images are the first 600 of each class by file name, linked at full resolution (the configs
crop 224 px); the common mini-ImageNet lists other images and stores them at 84 x 84 px, and the
LiSA paper defines neither (:data:`CHOICE`).
Every class and file is checked before anything is written; missing classes and classes with
fewer than 600 images are listed. An existing non-empty output folder is refused.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from projects.lisa.datasets.mini_imagenet import IMAGES_PER_CLASS, MINI_IMAGENET_CLASSES, TRAIN_PER_CLASS, split_class

EXTENSIONS = ('.jpeg', '.jpg', '.png')
#: What ``--help`` tells the user about the images chosen.
CHOICE = (f'Which images: the first {IMAGES_PER_CLASS} of each class by file name, split {TRAIN_PER_CLASS} train / '
          f'{IMAGES_PER_CLASS - TRAIN_PER_CLASS} val, linked at ImageNet\'s full resolution (the configs crop 224 px '
          'from them, as on ImageNet-1K). This is a choice: the common mini-ImageNet (Ravi & Larochelle\'s csv files) '
          'lists specific images per class and is usually stored at 84 x 84 px, and the LiSA paper defines neither.')


def plan(imagenet: Path) -> dict[str, tuple[list[Path], list[Path]]]:
    """``wnid -> (train files, val files)`` in ``imagenet/train``; raises listing every problem."""
    source = imagenet / 'train'
    if not source.is_dir():
        raise FileNotFoundError(f'{source} is not a folder: IMAGENET must be the ImageNet-1K root that holds '
                                'train/<wnid>/')
    missing, short, splits = [], [], {}
    for wnid in MINI_IMAGENET_CLASSES:
        folder = source / wnid
        if not folder.is_dir():
            missing.append(wnid)
            continue
        files = [p.name for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS]
        try:
            train, val = split_class(files)
        except ValueError:
            short.append(f'{wnid} ({len(files)})')
            continue
        splits[wnid] = ([folder / f for f in train], [folder / f for f in val])
    problems = []
    if missing:
        problems.append(f'{len(missing)} of the 100 mini-ImageNet classes are missing in {source}: '
                        f'{" ".join(missing)}')
    if short:
        problems.append(f'{len(short)} classes have fewer than {IMAGES_PER_CLASS} images (count in brackets): '
                        f'{" ".join(short)}')
    if problems:
        raise FileNotFoundError('\n'.join(problems))
    return splits


def link(splits: dict[str, tuple[list[Path], list[Path]]], out: Path) -> None:
    """Symlink every planned file into ``out/{train,val}/<wnid>/`` (absolute targets)."""
    for wnid, parts in splits.items():
        for split, files in zip(('train', 'val'), parts):
            folder = out / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for f in files:
                os.symlink(f.resolve(), folder / f.name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=CHOICE)
    parser.add_argument('imagenet', type=Path, help='ImageNet-1K root (holds train/<wnid>/)')
    parser.add_argument('--out', type=Path, default=Path('data/mini-imagenet'),
                        help='output folder (default: data/mini-imagenet)')
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f'--out {args.out} exists and is not empty; remove it or choose another folder')
    try:
        splits = plan(args.imagenet)
    except FileNotFoundError as error:
        sys.exit(f'prepare_mini_imagenet: {error}')
    link(splits, args.out)
    print(f'{args.out}: {len(splits)} classes, train {sum(len(t) for t, _ in splits.values())} and '
          f'val {sum(len(v) for _, v in splits.values())} images (symlinks into {args.imagenet / "train"})')


if __name__ == '__main__':
    main()
