"""Segment or detect with an ONNX file of tools/export_onnx.py alone (onnxruntime, no torch model).

    python tools/onnx_infer.py MODEL.onnx IMAGE [--out PNG] [--opacity A] [--score-thr 0.3]

The file's metadata (written at export: task, resize, normalisation, padding, classes, palette)
says how to prepare the image and what comes out. A segmentor's label map, at the image's size,
is drawn over it in the palette's colours as mmseg's visualiser draws a prediction, and the
classes found are printed with their share of the pixels
(:mod:`projects.lisa.deploy.infer`). A Mask R-CNN's detections scoring above ``--score-thr``
are drawn as mmdet's ``DetLocalVisualizer`` draws them (masks and boxes in the class colours,
"class: score" labels) and printed with their boxes (:mod:`projects.lisa.deploy.detect`).

It imports onnxruntime, numpy and OpenCV only (no torch, no OpenMMLab package): what a machine that
runs an exported model has (``tests/test_imports.py``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np

from projects.lisa.deploy.detect import OnnxDetector, draw_detections
from projects.lisa.deploy.infer import OnnxSegmentor, blend, class_shares, open_session
from projects.lisa.deploy.metadata import MetadataError

RUNNERS = {'segmentation': OnnxSegmentor, 'detection': OnnxDetector}
OPACITY = {'segmentation': 0.5, 'detection': 0.8}  # this tool's overlay; DetLocalVisualizer's alpha


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('model', type=Path, help='an ONNX segmentor or Mask R-CNN written by tools/export_onnx.py')
    parser.add_argument('image', type=Path, help='the image to segment or detect in')
    parser.add_argument('--out', type=Path, help='drawn PNG (default: work_dirs/onnx_infer/<image name>.png)')
    parser.add_argument('--opacity', type=float,
                        help='opacity of the class colours, 0 to 1 (default 0.5 for a segmentor, 0.8 for a detector)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detector: draw and print the detections scoring above this, 0 to 1')
    args = parser.parse_args(argv)
    for name in ('model', 'image'):
        if not getattr(args, name).is_file():
            parser.error(f"{name} '{getattr(args, name)}' is not a file")
    if args.opacity is not None and not 0 <= args.opacity <= 1:
        parser.error(f'--opacity={args.opacity} must be between 0 and 1')
    if not 0 <= args.score_thr <= 1:
        parser.error(f'--score-thr={args.score_thr} must be between 0 and 1')
    args.out = args.out or Path('work_dirs/onnx_infer') / (args.image.stem + '.png')
    return args


def imread(path: Path) -> np.ndarray | None:
    """The image at ``path`` in BGR order, as mmseg's and mmdet's ``LoadImageFromFile`` read it
    (``mmcv.imread``: the file's bytes decoded by OpenCV, EXIF orientation applied); None if it is
    not an image."""
    data = np.frombuffer(path.read_bytes(), np.uint8)
    return cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None


def imwrite(image: np.ndarray, path: Path) -> None:
    """``image`` (BGR) written to ``path`` in the format of its suffix, folders made (``mmcv.imwrite``)."""
    ok, encoded = cv2.imencode(path.suffix, image)
    if not ok:
        raise ValueError(f'OpenCV cannot write an image as {path}')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encoded.tobytes())


def main(argv=None) -> int:
    args = parse_args(argv)
    image = imread(args.image)
    if image is None:
        print(f"error: image '{args.image}' is not an image OpenCV can read", file=sys.stderr)
        return 1
    try:
        opened = open_session(args.model, *RUNNERS)
        task = opened[1].task
        model = RUNNERS[task](args.model, opened)
        result = model(image)
    except MetadataError as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    meta = model.metadata
    opacity = OPACITY[task] if args.opacity is None else args.opacity
    rgb = image[..., ::-1]
    if task == 'segmentation':
        imwrite(blend(rgb, result, meta.palette, opacity)[..., ::-1], args.out)
        print(f'{args.image}: {result.shape[0]}x{result.shape[1]} label map, overlay written to {args.out}')
        for name, share in class_shares(result, meta.classes):
            print(f'  {name}: {100 * share:.1f} %')
        return 0
    shown = result.above(args.score_thr)
    imwrite(draw_detections(rgb, shown, meta.classes, meta.palette, opacity)[..., ::-1], args.out)
    print(f'{args.image}: {len(shown)} of {len(result)} detections above --score-thr={args.score_thr:g}, '
          f'drawn to {args.out}')
    for box, score, label in zip(shown.boxes, shown.scores, shown.labels):
        print(f'  {meta.classes[label]}: {score:.3f} at ({", ".join(f"{v:.1f}" for v in box)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
