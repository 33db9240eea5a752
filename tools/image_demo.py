"""Run a trained model on one image and draw its prediction (segmentation, detection or classification).

    python tools/image_demo.py CONFIG CHECKPOINT IMAGE --out FILE [--device cpu] [--score-thr 0.3]
                               [--opacity 0.5] [--allow-{new,unused,mismatch} GLOB ...]

The task is read from the config (``default_scope``); the picture is drawn by that library's
visualiser, as mmseg's / mmdet's / mmpretrain's ``demo/image_demo.py`` draw it
(``projects/lisa/apis/inference.py``). The checkpoint must fit the model (``--allow-*`` as in
``tools/test.py``).
"""
from __future__ import annotations

import argparse
import os.path as osp
import sys

from mmengine.config import DictAction
from mmengine.logging import MMLogger

from projects.lisa.apis import describe, draw, inference, init_model
from projects.lisa.engine.runtime_config import add_allow_args
from projects.lisa.models.backbones.loading import IncompleteCheckpointError


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('image', help='image file')
    parser.add_argument('--out', required=True, help='where the drawn prediction goes (e.g. result.png)')
    parser.add_argument('--device', default='cpu', help="'cpu' or 'cuda:0'")
    parser.add_argument('--score-thr', type=float, default=0.3, help='detection: boxes drawn above this score')
    parser.add_argument('--opacity', type=float, default=0.5, help='segmentation / detection: opacity of the drawing')
    add_allow_args(parser)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    args = parser.parse_args()
    if not 0 < args.opacity <= 1:
        parser.error(f'--opacity must be in (0, 1], got {args.opacity}')
    if not 0 <= args.score_thr <= 1:
        parser.error(f'--score-thr must be in [0, 1], got {args.score_thr}')
    for name in ('config', 'checkpoint', 'image'):
        if not osp.isfile(getattr(args, name)):
            parser.error(f'{name} {getattr(args, name)!r} does not exist')
    return args


def main() -> None:
    args = parse_args()
    MMLogger.get_instance('image_demo', log_level='WARNING')  # the loading report only where it refuses
    try:
        model = init_model(args.config, args.checkpoint, args.device, allow_new=args.allow_new or (),
                           allow_unused=args.allow_unused or (), allow_mismatch=args.allow_mismatch or (),
                           cfg_options=args.cfg_options)
    except (IncompleteCheckpointError, ValueError) as error:
        sys.exit(str(error))
    result = inference(model, args.image)
    draw(model, args.image, result, args.out, score_thr=args.score_thr, opacity=args.opacity)
    print(f'{args.out}: {describe(model, result, args.score_thr)}')


if __name__ == '__main__':
    main()
