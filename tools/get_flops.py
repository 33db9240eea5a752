"""FLOPs and parameters of configs, in the convention of LiSA's Tables 3-4.

MMEngine's jit-trace FLOP counter (one multiply-add = one FLOP, matrix
products counted) with handles for softmax attention, LiSA's walk and its
local branch (``projects/lisa/analysis/flops.py``). Inputs: segmentation
2048x512, detection 1280x800, classification the backbone's image size;
``--shape`` overrides. The model is built from the config without loading
weights.

Examples::

    python tools/get_flops.py configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py
    python tools/get_flops.py CONFIG --shape 512 512 --by-operator
    python tools/get_flops.py --paper      # every config of Tables 3-4 beside the paper's figure
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from projects.lisa.analysis.flops import PAPER_GFLOPS, Complexity, config_complexity

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / 'configs'


def paper_key(config: Path) -> str | None:
    """The config's path under ``configs/`` (the key of ``PAPER_GFLOPS``), or None."""
    config = config.resolve()
    return str(config.relative_to(CONFIGS)) if config.is_relative_to(CONFIGS) else None


def row(config: Path, result: Complexity) -> str:
    """Markdown row: config, input, parameters, GFLOPs, the paper's GFLOPs and the difference."""
    key = paper_key(config)
    paper = PAPER_GFLOPS.get(key)
    h, w = result.input_hw
    gflops = result.flops / 1e9
    cells = [f'`{key or config}`', f'{w}x{h}', f'{result.params / 1e6:.2f}', f'{gflops:.1f}']
    cells += [f'{paper}', f'{100 * (gflops / paper - 1):+.1f}%'] if paper else ['-', '-']
    return '| ' + ' | '.join(cells) + ' |'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('configs', nargs='*', type=Path, help='config files')
    parser.add_argument('--paper', action='store_true',
                        help="all configs of the paper's Tables 3-4 (unless configs are given) "
                             "in a table beside the paper's GFLOPs")
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'), help='input height and width')
    parser.add_argument('--by-operator', action='store_true', help='FLOPs per operator and the ops not counted')
    parser.add_argument('--threads', type=int, default=None, help='torch threads (default: torch\'s)')
    args = parser.parse_args(argv)
    if not args.configs and not args.paper:
        parser.error('give config files, or --paper')
    if not args.configs:
        args.configs = [CONFIGS / name for name in PAPER_GFLOPS]
    for config in args.configs:
        if not config.is_file():
            parser.error(f'config {config} does not exist')
    if args.threads is not None and args.threads < 1:
        parser.error(f'--threads={args.threads} must be >= 1')
    if args.shape is not None and min(args.shape) < 1:
        parser.error(f'--shape {args.shape} must be two positive ints')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lines = ['| config | input (WxH) | params (M) | GFLOPs | paper GFLOPs | difference |',
             '|---|---|---|---|---|---|']
    for config in args.configs:
        start = time.perf_counter()
        result = config_complexity(config, args.shape)
        h, w = result.input_hw
        print(f'{config}: {result.flops / 1e9:.2f} GFLOPs, {result.params / 1e6:.2f} M parameters '
              f'at {w}x{h} ({time.perf_counter() - start:.0f} s)', flush=True)
        if args.by_operator:
            for op, flops in result.by_operator.most_common():
                print(f'    {op:32s} {flops / 1e9:10.3f} G')
            print('    not counted: ' + ', '.join(f'{op} x{n}' for op, n in sorted(result.uncounted.items())))
        lines.append(row(config, result))
    if args.paper:
        print('\n'.join(lines))


if __name__ == '__main__':
    main()
