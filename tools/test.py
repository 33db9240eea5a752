"""Evaluate a checkpoint of any LiSA config with MMEngine (mIoU, box/mask AP, top-k).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--show-dir DIR] [--out PATH]
                         [--allow-new GLOB ...] [--allow-unused GLOB ...] [--allow-mismatch GLOB ...]

Every tensor of the model must come from CHECKPOINT, and every tensor of CHECKPOINT must be
used, except those the ``--allow-*`` globs name (the report of
``projects.lisa.models.backbones.loading.check_state_dict``). ``--show-dir`` draws every test
image (ground truth beside prediction), ``--out`` keeps the predictions in the library's format
(``projects/lisa/apis/predictions.py``).
    torchrun --nproc_per_node N tools/test.py CONFIG CHECKPOINT --launcher pytorch
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys

from mmengine.config import Config, DictAction

from projects.lisa.apis.predictions import dump_predictions, show_predictions
from projects.lisa.data_checks.data_check import Runner, check_data_roots
from projects.lisa.engine.checkpoint import CheckpointReadError, load_checkpoint_file
from projects.lisa.engine.dist import setup_cpu_distributed
from projects.lisa.engine.runtime_config import add_allow_args, add_safe_runtime
from projects.lisa.registry import legacy_imports, register_all_modules


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='where logs and metrics go (default: work_dirs/<config>)')
    parser.add_argument('--show-dir', help='draw every test image, ground truth beside prediction, into this folder')
    parser.add_argument('--out', help='keep the predictions: label-map PNGs in this folder (segmentation), '
                                      'a .pkl file (detection, classification)')
    add_allow_args(parser)
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main() -> None:
    args = parse_args()
    if not osp.isfile(args.checkpoint):
        sys.exit(f'checkpoint {args.checkpoint!r} does not exist')
    try:
        load_checkpoint_file(args.checkpoint)
    except CheckpointReadError as error:
        sys.exit(f'checkpoint {error}')
    register_all_modules()  # as mmdet's test.py does: also for configs that do not import projects.lisa.registry
    cfg = Config.fromfile(args.config)
    if (change := legacy_imports(cfg)) and os.environ.get('RANK', '0') == '0':
        print(f'warning: {change}', file=sys.stderr)
    cfg.launcher = args.launcher
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        'work_dirs', osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    # the checkpoint loads fully or stops; a metric of non-finite predictions fails instead of printing a number
    add_safe_runtime(cfg, allow_new=args.allow_new, allow_unused=args.allow_unused, allow_mismatch=args.allow_mismatch)
    try:
        check_data_roots(cfg, ('test_dataloader', ))
    except FileNotFoundError as error:
        sys.exit(str(error))
    try:
        if args.show_dir:
            show_predictions(cfg, args.show_dir)
        dump = dump_predictions(cfg, args.out) if args.out else None
    except ValueError as error:
        sys.exit(str(error))
    setup_cpu_distributed(cfg)
    runner = Runner.from_cfg(cfg)
    if dump:
        dump(runner)
    runner.test()


if __name__ == '__main__':
    main()
