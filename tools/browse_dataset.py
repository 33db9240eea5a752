"""Draw what a config's training pipeline feeds the model, with its annotations, to PNG files.

    python tools/browse_dataset.py CONFIG --output-dir DIR [--max-samples N] [--loader train|val|test]
        [--cfg-options key=value ...]

As the ``browse_dataset.py`` of mmseg / mmdet / mmpretrain, for segmentation, detection and
classification configs alike (the task follows the config's ``default_scope``): each sample as the
pipeline packs it, with its label map, boxes and masks, or class drawn by the library's visualizer.
See ``projects/lisa/apis/browse.py``.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from mmengine.config import Config, DictAction

from projects.lisa.apis.browse import browse
from projects.lisa.engine.library_output import library_output_to


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('--output-dir', required=True, help='folder for the drawn samples (PNG)')
    parser.add_argument('--max-samples', type=int, default=10, help='samples to draw, from the first (default: 10)')
    parser.add_argument('--loader', choices=['train', 'val', 'test'], default='train',
                        help='whose dataset and pipeline to draw (default: train)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    return parser, parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parser, args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    log = Path(args.output_dir) / 'browse_dataset.log'
    try:
        with library_output_to(log):  # the datasets' and visualizers' own messages and warnings
            drawn = browse(cfg, args.output_dir, args.max_samples, f'{args.loader}_dataloader')
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    print(f'{len(drawn)} samples of the {args.loader} pipeline drawn into {args.output_dir} '
          f'(the libraries\' messages: {log})')


if __name__ == '__main__':
    main()
