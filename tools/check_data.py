"""List every invalid sample of a config's datasets, with its file, the bad value and what is valid.

    python tools/check_data.py CONFIG [--split train|val|test] [--workers N] [--memory-limit GB] [--strict]

Loads each split's dataset as training would (COCO annotations are checked
while the file is parsed) and checks every sample's files in N processes
(default: one per CPU), then lists the classes no sample of a split holds and
the model's num_classes settings that disagree with the data; a segmentation
split that is evaluated (val, test) has each image's test step estimated
against the memory (default: this machine's).
Exits with 1 if any sample is invalid; notes (items the library drops by
design, e.g. boxes under 1 px, and classes a split lacks) are listed and fail
the check only with --strict. ``tools/train.py --check-data`` runs this first.
"""
from __future__ import annotations

import argparse
import sys

from mmengine.config import Config, DictAction

from projects.lisa.data_checks.data_check import check_data_roots
from projects.lisa.data_checks.data_problems import report
from projects.lisa.data_checks.split_check import check_config_data
from projects.lisa.registry import register_all_modules

SPLITS = {'train': 'train_dataloader', 'val': 'val_dataloader', 'test': 'test_dataloader'}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='config file')
    parser.add_argument('--split', choices=list(SPLITS), action='append',
                        help='split to check (repeatable; default: train, val, and test where it is not val)')
    parser.add_argument('--workers', type=int, default=0, help='processes (default 0: one per CPU)')
    parser.add_argument('--memory-limit', type=float, metavar='GB',
                        help="memory of the machine that evaluates (default: this machine's)")
    parser.add_argument('--strict', action='store_true', help='fail on notes too')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, help='override config entries, key=value')
    args = parser.parse_args()
    if args.workers < 0:
        parser.error(f'--workers must be >= 0 (0: one per CPU), got {args.workers}')
    if args.memory_limit is not None and not args.memory_limit > 0:
        parser.error(f'--memory-limit must be a positive number of GB, got {args.memory_limit}')
    return args


def main() -> None:
    args = parse_args()
    register_all_modules()  # AlignResize and the rest, also for configs that do not import projects.lisa.registry
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    splits = args.split or [s for s in SPLITS if s != 'test' or cfg.get('test_dataloader') != cfg.get('val_dataloader')]
    loaders = tuple(SPLITS[s] for s in splits if cfg.get(SPLITS[s]))
    try:
        check_data_roots(cfg, loaders)
    except FileNotFoundError as error:
        sys.exit(str(error))
    failed = False
    memory = None if args.memory_limit is None else int(args.memory_limit * 1e9)
    for loader, problems in check_config_data(cfg, loaders, args.workers, memory).items():
        print(f'{loader}: {report(problems) if problems else "no problems"}')
        failed |= any(p.error or args.strict for p in problems)
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
