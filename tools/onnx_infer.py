"""Segment an image with an ONNX file of tools/export_onnx.py alone (onnxruntime, no torch model).

    python tools/onnx_infer.py MODEL.onnx IMAGE [--out PNG] [--opacity 0.5]

The file's metadata (written at export: normalisation, padding, classes, palette) says how to
prepare the image; the label map, at the image's size, is drawn over it in the palette's
colours as mmseg's visualiser draws a prediction, written to ``--out``, and the classes found
are printed with their share of the pixels. How: :mod:`projects.lisa.deploy.infer`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mmcv

from projects.lisa.deploy.infer import OnnxSegmentor, blend, class_shares
from projects.lisa.deploy.metadata import MetadataError


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model', type=Path, help='an ONNX segmentor written by tools/export_onnx.py')
    parser.add_argument('image', type=Path, help='the image to segment')
    parser.add_argument('--out', type=Path, help='overlay PNG (default: work_dirs/onnx_infer/<image name>.png)')
    parser.add_argument('--opacity', type=float, default=0.5, help='opacity of the class colours, 0 to 1')
    args = parser.parse_args(argv)
    for name in ('model', 'image'):
        if not getattr(args, name).is_file():
            parser.error(f"{name} '{getattr(args, name)}' is not a file")
    if not 0 <= args.opacity <= 1:
        parser.error(f'--opacity={args.opacity} must be between 0 and 1')
    args.out = args.out or Path('work_dirs/onnx_infer') / (args.image.stem + '.png')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    image = mmcv.imread(str(args.image))  # BGR, as mmseg's LoadImageFromFile reads it
    if image is None:
        print(f"error: image '{args.image}' is not an image mmcv can read", file=sys.stderr)
        return 1
    try:
        segmentor = OnnxSegmentor(args.model)
        labels = segmentor(image)
    except MetadataError as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    meta = segmentor.metadata
    mmcv.imwrite(blend(image[..., ::-1], labels, meta.palette, args.opacity)[..., ::-1], str(args.out))
    print(f'{args.image}: {labels.shape[0]}x{labels.shape[1]} label map, overlay written to {args.out}')
    for name, share in class_shares(labels, meta.classes):
        print(f'  {name}: {100 * share:.1f} %')
    return 0


if __name__ == '__main__':
    sys.exit(main())
