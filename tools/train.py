"""Train any LiSA config (segmentation, detection, classification) with MMEngine.

Same interface as the train.py of mmseg / mmdet / mmpretrain (``mim train``
runs those; this one adds CPU multi-process support):

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp] [--check-data]
    torchrun --nproc_per_node N tools/train.py CONFIG --launcher pytorch
"""
from __future__ import annotations

import argparse
import os
import os.path as osp
import sys

from mmengine.config import Config, DictAction

from projects.lisa.engine.data_check import Runner, check_data_roots
from projects.lisa.engine.data_validation import check_config_data, report
from projects.lisa.engine.dist import setup_cpu_distributed


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('--work-dir', help='where logs and checkpoints go (default: work_dirs/<config>)')
    parser.add_argument('--resume', nargs='?', const='auto', default=None,
                        help='resume from CKPT, or from the latest checkpoint in the work dir if no CKPT')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision')
    parser.add_argument('--check-data', action='store_true',
                        help='first check every training and validation sample (tools/check_data.py); stop on errors')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main() -> None:
    args = parse_args()
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    cfg.work_dir = args.work_dir or cfg.get('work_dir') or osp.join(
        'work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif args.resume is not None:
        cfg.resume, cfg.load_from = True, args.resume
    try:
        check_data_roots(cfg, ('train_dataloader', 'val_dataloader'))
    except FileNotFoundError as error:
        sys.exit(str(error))
    if args.check_data:
        problems = [p for found in check_config_data(cfg, ('train_dataloader', 'val_dataloader')).values()
                    for p in found]
        if any(p.error for p in problems):
            sys.exit(f'--check-data: invalid data, nothing trained:\n{report(problems)}')
        print(f'--check-data: {report(problems) if problems else "all samples valid"}')
    setup_cpu_distributed(cfg)
    Runner.from_cfg(cfg).train()


if __name__ == '__main__':
    main()
