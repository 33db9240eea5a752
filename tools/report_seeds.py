"""Mean ± std over the seed runs of each config (Fig. 3 reports 3 runs per truncation depth T).

    python tools/report_seeds.py WORK_DIR [WORK_DIR ...] [--metric accuracy/top1] [--reduce last|max]
        [--json OUT]

Each WORK_DIR holds one run per seed, as tools/dist_train_seeds.sh writes them:
``WORK_DIR/seed<S>/<timestamp>/vis_data/scalars.json`` (MMEngine's own log of the validation
metrics). A run's value is its metric at the last validation (``--reduce last``, default) or
its best (``--reduce max``); when a run was resumed, the newest log that holds the metric
counts. The table gives the mean and the sample standard deviation (n - 1) over the seeds.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from projects.lisa.analysis.scalars import run_metric
from projects.lisa.analysis.statistics import mean_std


def summarise(work_dir: Path, metric: str, reduce: str) -> dict:
    """``{'config', 'seeds', 'values', 'mean', 'std'}`` over ``work_dir/seed*``."""
    runs = sorted((p for p in work_dir.glob('seed*') if p.is_dir() and p.name[len('seed'):].isdigit()),
                  key=lambda p: int(p.name[len('seed'):]))
    if not runs:
        raise FileNotFoundError(f'{work_dir} holds no seed<S> run folders')
    values = [run_metric(r, metric, reduce) for r in runs]
    mean, std = mean_std(values)
    return dict(config=work_dir.name, seeds=[int(r.name[len('seed'):]) for r in runs], values=values, mean=mean,
                std=std)


def markdown(rows: list[dict], metric: str) -> str:
    lines = [f'| config | {metric}: mean ± std | runs (seed: value) |', '|---|---|---|']
    for r in rows:
        runs = ', '.join(f'{s}: {v:.2f}' for s, v in zip(r['seeds'], r['values']))
        lines.append(f"| {r['config']} | {r['mean']:.2f} ± {r['std']:.2f} | {runs} |")
    return '\n'.join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='+', type=Path, help='one folder per config, holding seed<S>/ runs')
    parser.add_argument('--metric', default='accuracy/top1', help='metric key (default: accuracy/top1)')
    parser.add_argument('--reduce', choices=('last', 'max'), default='last',
                        help='value of a run: at its last validation (default) or its best')
    parser.add_argument('--json', type=Path, help='also write the rows to this JSON file')
    args = parser.parse_args(argv)
    try:
        rows = [summarise(d, args.metric, args.reduce) for d in args.work_dirs]
    except FileNotFoundError as error:
        sys.exit(f'report_seeds: {error}')
    print(markdown(rows, args.metric))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == '__main__':
    main()
