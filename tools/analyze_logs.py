"""Plot the training curves of MMEngine runs (loss, lr, mIoU, bbox_mAP...) from their scalars.json.

    python tools/analyze_logs.py plot_curve WORK_DIR_OR_JSON... --keys loss mIoU --out curves.png
        [--legend NAME...] [--title TITLE]

As ``analyze_logs.py plot_curve`` of mmdet / mmseg, on the log MMEngine writes,
``<work dir>/<timestamp>/vis_data/scalars.json`` (a work dir stands for its newest start that
logged one of the keys), with matplotlib alone: one subplot per key, one line per run, against
iterations (or epochs, for metrics validated by epoch). See ``projects/lisa/analysis/curves.py``.
"""
from __future__ import annotations

import argparse

from projects.lisa.analysis.curves import plot_runs


def parse_args(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest='command', required=True)
    curve = commands.add_parser('plot_curve', help='plot keys of one or more runs to an image file')
    curve.add_argument('logs', nargs='+', metavar='WORK_DIR_OR_JSON',
                       help='MMEngine work dirs (their newest run) or scalars.json files')
    curve.add_argument('--keys', nargs='+', default=['loss'],
                       help="keys to plot, as logged or their last part: loss, lr, mIoU, bbox_mAP (default: loss)")
    curve.add_argument('--out', required=True, help='image file to write (.png, .pdf, .svg)')
    curve.add_argument('--legend', nargs='+', help='one name per run (default: the work dirs\' names)')
    curve.add_argument('--title', help='title of the figure')
    return parser, parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    parser, args = parse_args(argv)
    try:
        plot_runs(args.logs, args.keys, args.out, legend=args.legend, title=args.title)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    print(f'{", ".join(args.keys)} of {len(args.logs)} run(s) written to {args.out}')


if __name__ == '__main__':
    main()
