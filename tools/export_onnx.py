"""Export a LiSA segmentation model or Mask R-CNN to ONNX, checked against eager.

    python tools/export_onnx.py CONFIG CKPT --shape H W [--check-shape H W] [--out FILE]
                                [--allow-new GLOB ...] [--allow-unused GLOB ...] [--allow-mismatch GLOB ...]

``CKPT`` is a checkpoint of the config's model, or ``none`` for random
weights. What is exported (a segmentor's logits; a Mask R-CNN's boxes, scores, labels
and 28 x 28 masks, for one image with its ``img_shape``; height and width dynamic) and
how: :mod:`projects.lisa.deploy.onnx`, :mod:`projects.lisa.deploy.detector`. The file
carries what inference needs besides the graph (normalisation, padding, classes, palette:
:mod:`projects.lisa.deploy.metadata`), so ``tools/onnx_infer.py`` segments or detects from it alone.

The exported file is then always run by onnxruntime at ``--shape`` and at
``--check-shape`` (default: 32 pixels taller and 64 wider) and compared with
eager PyTorch: the tool exits with status 1 unless every output agrees within
``--rtol`` (``max |onnx - eager| / max |eager|``; a detector's outputs must
also have the same number of detections), so a graph that computes something
else never passes unnoticed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from projects.lisa.deploy import build_model, export, inference_metadata, relative_errors
from projects.lisa.engine.checkpoint import CheckpointReadError, load_checkpoint_file
from projects.lisa.engine.runtime_config import add_allow_args
from projects.lisa.models.backbones.loading import IncompleteCheckpointError
from projects.lisa.registry import register_all_modules


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('config', help='an mmseg segmentor or mmdet Mask R-CNN config')
    parser.add_argument('checkpoint', help="the model's checkpoint, or 'none' for random weights")
    parser.add_argument('--shape', type=int, nargs=2, required=True, metavar=('H', 'W'), help='export input size')
    parser.add_argument('--check-shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='second input size of the check (default: H + 32, W + 64)')
    parser.add_argument('--out', type=Path, help='ONNX file (default: work_dirs/onnx/<config name>.onnx)')
    parser.add_argument('--opset', type=int, default=18, help='ONNX opset (>= 17)')
    parser.add_argument('--rtol', type=float, default=1e-4, help='largest relative error accepted by the check')
    parser.add_argument('--seed', type=int, default=0, help='random weights (CKPT none) and check inputs')
    add_allow_args(parser)
    args = parser.parse_args(argv)
    if args.opset < 17:
        parser.error(f'--opset={args.opset} must be >= 17')
    for name in ('shape', 'check_shape'):
        size = getattr(args, name)
        if size is not None and min(size) < 32:
            parser.error(f'--{name.replace("_", "-")}={size}: both sides must be >= 32 (the output stride)')
    if not args.rtol > 0:
        parser.error(f'--rtol={args.rtol} must be > 0')
    args.checkpoint = None if args.checkpoint.lower() == 'none' else args.checkpoint
    if args.checkpoint is not None and not Path(args.checkpoint).is_file():
        parser.error(f'checkpoint {args.checkpoint!r} is not a file (or pass none for random weights)')
    if args.checkpoint is not None:
        try:
            load_checkpoint_file(args.checkpoint)
        except CheckpointReadError as error:
            parser.error(f'checkpoint {error}')
    args.check_shape = tuple(args.check_shape or (args.shape[0] + 32, args.shape[1] + 64))
    args.shape = tuple(args.shape)
    args.out = args.out or Path('work_dirs/onnx') / (Path(args.config).stem + '.onnx')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    register_all_modules()  # also for configs that do not import projects.lisa.registry
    torch.manual_seed(args.seed)
    try:
        model = build_model(args.config, args.checkpoint, allow_new=args.allow_new or (),
                            allow_unused=args.allow_unused or (), allow_mismatch=args.allow_mismatch or ())
    except (ValueError, IncompleteCheckpointError) as error:  # not exported here, or not the config's checkpoint
        print(f'error: {error}', file=sys.stderr)
        return 1
    metadata = inference_metadata(args.config)
    export(model, args.shape, args.out, args.opset, metadata=metadata.to_props())
    print(f'exported {args.out} (opset {args.opset}, input height and width dynamic, task {metadata.task}, '
          f'{len(metadata.classes)} classes)')
    errors = relative_errors(model, args.out, [args.shape, args.check_shape], seed=args.seed)
    worst = max(e for _, _, e in errors)
    for shape, name, error in errors:
        print(f'  onnxruntime vs eager at {shape[0]}x{shape[1]}, {name}: relative error {error:.2e}')
    if not worst <= args.rtol:
        print(f'FAILED: relative error {worst:.2e} > --rtol={args.rtol:g}: the ONNX graph does not compute the '
              'model', file=sys.stderr)
        return 1
    print(f'OK: every output within {args.rtol:g} relative of eager')
    return 0


if __name__ == '__main__':
    sys.exit(main())
