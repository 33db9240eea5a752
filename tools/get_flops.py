"""FLOPs and parameters of configs, in the convention of LiSA's Tables 3-4.

MMEngine's jit-trace FLOP counter (one multiply-add = one FLOP, matrix
products counted) with handles for softmax attention, LiSA's walk and its
local branch (``projects/lisa/benchmarks/flops.py``). Inputs: segmentation
2048x512, detection 1280x800, classification the backbone's image size;
``--shape`` overrides. The model is built from the config without loading
weights.

Examples::

    python tools/get_flops.py configs/segmentation/fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py
    python tools/get_flops.py CONFIG --shape 512 512 --by-operator
    python tools/get_flops.py --paper      # every config of Tables 3-4 beside the paper's figure
    python tools/get_flops.py --paper --markdown docs/flops.md   # the same, written as the project's doc
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from projects.lisa.analysis.paper import PAPER_GFLOPS, PAPER_MODELS
from projects.lisa.benchmarks.flops import Complexity, config_complexity
from projects.lisa.registry import register_all_modules

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
    parser.add_argument('--markdown', type=Path, help='also write the table (with --paper: and its reading '
                        'against the paper) to this markdown file, e.g. docs/flops.md')
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


def paper_reading(results: dict[str, Complexity]) -> list[str]:
    """Paragraphs comparing the counted Tables 3-4 rows with the paper's, from this run's figures."""
    methods = {'seg': 'S-FPN', 'uper': 'UperNet', 'det': 'Mask R-CNN'}
    rows = {'seg': ('PVT-T', 'FLatten-PVT-T', 'LiSA-PVT-T'), 'uper': ('Swin-T', 'FLatten-Swin-T', 'LiSA-Swin-T'),
            'det': ('PVT-T', 'LiSA-PVT-T')}
    models = {m.name: m for m in PAPER_MODELS}
    ours, paper = {}, {}
    for table, backbones in rows.items():
        for backbone in backbones:
            model = models[f'{methods[table]} {backbone}']
            if model.config not in results:
                return []  # the reading needs every row
            ours[table, backbone] = results[model.config].flops / 1e9
            paper[table, backbone] = model.gflops

    def diff(table: str, a: str, b: str) -> str:
        return (f'{ours[table, a] - ours[table, b]:+.1f}G here, '
                f'{paper[table, a] - paper[table, b]:+d}G in the paper')

    return [
        '## Reading the table against the paper',
        f'The softmax baselines and the Swin rows match the paper (Semantic FPN + PVT-T {ours["seg", "PVT-T"]:.1f}G '
        f'vs {paper["seg", "PVT-T"]}G, UperNet + Swin-T {ours["uper", "Swin-T"]:.1f}G vs '
        f'{paper["uper", "Swin-T"]}G), so the paper counted its baseline rows in this convention.',
        f'The FLatten-PVT-T and LiSA-PVT-T rows do not ({ours["seg", "FLatten-PVT-T"]:.1f}G and '
        f'{ours["seg", "LiSA-PVT-T"]:.1f}G here, {paper["seg", "FLatten-PVT-T"]}G and '
        f'{paper["seg", "LiSA-PVT-T"]}G in the paper). FLatten\'s PVT, which the LiSA paper follows, puts linear '
        'attention in all four stages without spatial reduction (sr = 1). That drops the QK^T and AV products '
        'of PVT\'s spatial-reduction attention and adds only full-resolution K/V projections, the d x d '
        'products and the 5x5 depthwise convolution, so the count falls below softmax PVT-T\'s: no sr = 1 '
        f'architecture gives {paper["seg", "FLatten-PVT-T"]}G, and no published FLatten-PVT variant does. '
        'The paper\'s two rows most likely come from FLatten\'s own paper or another counter (e.g. one that adds '
        'spatial-reduction attention\'s analytic FLOPs for every attention). The Mask R-CNN row has the same '
        f'cause: LiSA-PVT-T {ours["det", "LiSA-PVT-T"]:.1f}G here, below PVT-T\'s {ours["det", "PVT-T"]:.1f}G, '
        f'against {paper["det", "LiSA-PVT-T"]}G in the paper (PVT-T {paper["det", "PVT-T"]}G).',
        'The comparable figures are the differences within one architecture. LiSA - FLatten: '
        f'{diff("seg", "LiSA-PVT-T", "FLatten-PVT-T")} (PVT-T Semantic FPN); '
        f'{diff("uper", "LiSA-Swin-T", "FLatten-Swin-T")} (Swin-T UperNet). '
        f'FLatten - Swin: {diff("uper", "FLatten-Swin-T", "Swin-T")}, so the sign differs where ours is '
        'negative: here the linear attention of stages 1-2 (d x d products, depthwise conv) costs less than the '
        '7x7 windows\' QK^T and AV products it replaces; the paper does not say what it counted.',
    ]


def write_markdown(path: Path, argv: list[str], table: list[str], reading: list[str]) -> None:
    """The table (and its reading) as a markdown document, with the command that wrote it."""
    text = ['# FLOPs and parameters', '',
            f'Written by `python tools/get_flops.py {" ".join(argv)}` (do not edit by hand). '
            "MMEngine's counter with this project's handles (one multiply-add = one FLOP; matrix products, "
            'convolutions, norms and upsampling counted), segmentation at 2048x512, detection at 1280x800, '
            'weights not loaded.', '', *table, '']
    for paragraph in reading:
        text += [paragraph, '']
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n'.join(text))


def main(argv=None) -> None:
    args = parse_args(argv)
    register_all_modules()  # also for configs that do not import projects.lisa.registry
    if args.threads:
        torch.set_num_threads(args.threads)
    lines = ['| config | input (WxH) | params (M) | GFLOPs | paper GFLOPs | difference |',
             '|---|---|---|---|---|---|']
    results: dict[str, Complexity] = {}
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
        key = paper_key(config)
        if key is not None:
            results[key] = result
    if args.paper:
        print('\n'.join(lines))
    if args.markdown:
        reading = paper_reading(results) if args.paper and args.shape is None else []
        write_markdown(args.markdown, sys.argv[1:] if argv is None else list(argv), lines, reading)
        print(f'wrote {args.markdown}')


if __name__ == '__main__':
    main()
