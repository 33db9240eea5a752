"""How far does an attention carry information? The long-range probe sweep.

    python tools/long_range.py [--setting quick|full] [--attentions NAME ...] [--seeds 0 1 2]
        [--threads 1] [--jobs 2] [--work-dir work_dirs/long_range] [--markdown docs/long_range.md]
    python tools/long_range.py --from-rows work_dirs/long_range/rows.json --markdown docs/long_range.md

Writes the lookup probe (``projects/lisa/synthetic/long_range.py``) of each difficulty under
``data/long_range/``, trains ``configs/long_range/lookup_vit-1l_<attention>_64px.py`` for each
attention, difficulty and seed with ``tools/train.py`` (one process each, ``--threads``
threads, ``--jobs`` at a time), and reads the validation's pixel accuracy per distance bin and hop count
(:class:`~projects.lisa.synthetic.long_range_metric.LongRangeAccuracy`). The rows
(``<work-dir>/rows.json``) give the markdown: accuracy per distance bin and per hop count,
mean ± sample std over the seeds, the controls (softmax must solve the far bin, a local
model must not) and the training cost per attention; the plot goes beside the markdown
(``.png``).

Settings: ``quick`` is the six main attentions x 3 seeds at two difficulties: 1 hop (the
controls: global attention must solve the far bin, local attention must not) and 2 hops (where
a walk of T >= 2 steps can follow the chain in one layer); ``full`` adds LiSA global-only and
T in {1, 5, inf} and 3 and 4 hops (sized for a GPU). A run is the configs' 2000 iterations,
two to four minutes on one CPU thread (docs/long_range.md states each sweep's wall time).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mmengine.config import Config

from projects.lisa.synthetic.long_range import write_probe

ROOT = Path(__file__).resolve().parents[1]

CONFIG = 'configs/long_range/lookup_vit-1l_{}_64px.py'
MAIN = ('softmax', 'window', 'flatten', 'linear', 'lisa-local', 'lisa')
ALL = (*MAIN, 'lisa-global', 'lisa-t1', 'lisa-t5', 'lisa-tinf')
LOCAL = ('window', 'lisa-local')
"""Attentions whose receptive field in the one layer is small: LiSA local-only 2 tokens (11 px: 3x3
attention and 5x5 depthwise conv), window 7x7 at most 6 tokens per axis (34 px, inside its window)."""
LABELS = {'softmax': 'softmax (global)', 'window': 'window 7x7 (Swin)', 'flatten': 'FLatten', 'linear': 'linear',
          'lisa-local': 'LiSA local-only', 'lisa': 'LiSA T=3', 'lisa-global': 'LiSA global-only T=3',
          'lisa-t1': 'LiSA T=1', 'lisa-t5': 'LiSA T=5', 'lisa-tinf': 'LiSA T=inf'}
SETTINGS = {
    'quick': dict(attentions=MAIN, num_train=2000, num_val=200, difficulties={
        f'hops{h}': dict(size=64, hops=(h, h)) for h in (1, 2)}),
    'full': dict(attentions=ALL, num_train=8000, num_val=400, difficulties={
        f'hops{h}': dict(size=64, hops=(h, h)) for h in (1, 2, 3, 4)}),
}
PATHFINDER = {'pathfinder_seg': dict(size=64), 'pathfinder_cls': dict(size=64)}
CHANCE = 50.0
FAR_MIN = 48  # px: the far bin's lower edge (12 tokens), beyond the local models' receptive fields


def run_one(attention: str, difficulty: str, data_root: Path, seed: int, work_dir: Path, threads: int,
            max_iters: int | None) -> list[dict]:
    """Train one config with tools/train.py; return its rows (one per hop count and distance bin)."""
    run_dir = work_dir / difficulty / attention / f'seed{seed}'
    counts = run_dir / 'long_range.json'
    options = [f'randomness.seed={seed}', f'train_dataloader.dataset.data_root={data_root}',
               f'val_dataloader.dataset.data_root={data_root}', f'val_evaluator.out_file={counts}']
    if max_iters:
        options += [f'train_cfg.max_iters={max_iters}', f'train_cfg.val_interval={max_iters}',
                    f'param_scheduler.1.end={max_iters}', f'default_hooks.checkpoint.interval={max_iters}']
    iters = max_iters or Config.fromfile(ROOT / CONFIG.format(attention)).train_cfg.max_iters
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)}
    start = time.perf_counter()
    log = run_dir / 'train.log'
    run_dir.mkdir(parents=True, exist_ok=True)
    with log.open('w') as out:
        done = subprocess.run([sys.executable, 'tools/train.py', CONFIG.format(attention), '--work-dir',
                               str(run_dir), '--cfg-options', *options], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    if done.returncode or not counts.is_file():
        raise RuntimeError(f'{attention} seed {seed} ({difficulty}) failed (exit {done.returncode}); see {log}')
    step = [json.loads(line)['time'] for p in run_dir.glob('*/vis_data/scalars.json')
            for line in p.read_text().splitlines() if '"time"' in line and '"loss"' in line]
    cost = dict(iters=iters, seconds=seconds, s_per_iter=statistics.fmean(step) if step else math.nan)
    return [dict(attention=attention, difficulty=difficulty, seed=seed, **r, **cost)
            for r in json.loads(counts.read_text())]


def accuracy(rows: list[dict], keep) -> dict[int, float]:
    """``{seed: accuracy %}`` over the rows that ``keep`` accepts."""
    per_seed: dict[int, list[int]] = {}
    for r in rows:
        if keep(r):
            acc = per_seed.setdefault(r['seed'], [0, 0])
            acc[0] += r['correct']
            acc[1] += r['total']
    return {s: 100.0 * c / n for s, (c, n) in per_seed.items() if n}


def mean_std(values: dict[int, float]) -> tuple[float, float]:
    v = list(values.values())
    return (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else math.nan) if v else (math.nan, math.nan)


def cell(values: dict[int, float]) -> str:
    m, s = mean_std(values)
    return '–' if math.isnan(m) else (f'{m:.1f}' if math.isnan(s) else f'{m:.1f} ± {s:.1f}')


def bins_of(rows: list[dict]) -> list[tuple[float, float]]:
    return sorted({(r['lo'], r['hi']) for r in rows})


def bin_name(lo: float, hi: float) -> str:
    return f'{lo:g}-{hi:g}'


def window_ceiling() -> float:
    """Nearest-bin accuracy (%) of a perfect one-layer window model on the lookup.

    The nearest bin holds the cue's 4 edge neighbours. A window model sees the cue from a neighbour
    only inside one window: the ``n``-token grid is padded to windows of ``w`` tokens from the top
    left, so of the ``n - 1`` neighbour pairs along a row (or column) ``floor((n - 1) / w)`` straddle
    a border, where the model is at chance. With the cue placed uniformly the ceiling is
    ``share + (1 - share) * chance``, ``share = 1 - floor((n - 1) / w) / (n - 1)``: 93.3 % for
    16 tokens and 7x7 windows.
    """
    cfg = Config.fromfile(ROOT / CONFIG.format('window'))
    tokens = cfg.img_size // cfg.model.backbone.patch_size
    share = 1 - ((tokens - 1) // cfg.model.backbone.attn_cfgs.window_size) / (tokens - 1)
    return 100 * share + (1 - share) * CHANCE


def controls(rows: list[dict]) -> list[str]:
    """The two controls on hop-1 pixels: softmax >= 90 % on the far bin; each local model near
    chance there (<= chance + 10) and, on the nearest bin, within 5 points of softmax (LiSA
    local-only: its 3x3 neighbourhood holds the cue's) or of its ceiling (window:
    :func:`window_ceiling`)."""
    near = bins_of(rows)[0]
    one = [r for r in rows if r['hops'] == 1]
    far = lambda r: r['lo'] >= FAR_MIN  # noqa: E731
    def of(name, keep):
        return mean_std(accuracy([r for r in one if r['attention'] == name], keep))[0]
    lines = []
    soft_far, soft_near = of('softmax', far), of('softmax', lambda r: (r['lo'], r['hi']) == near)
    if not math.isnan(soft_far):
        lines.append(f"- (a) softmax, hop 1, distance >= {FAR_MIN} px: {soft_far:.1f} % "
                     f"({'passes' if soft_far >= 90 else 'FAILS'}: >= 90 % required)")
    for name in LOCAL:
        f, n = of(name, far), of(name, lambda r: (r['lo'], r['hi']) == near)
        if math.isnan(f):
            continue
        target, of_what = ((window_ceiling(), 'its ceiling (window borders)') if name == 'window'
                           else (soft_near, 'softmax'))
        ok = f <= CHANCE + 10 and abs(n - target) <= 5
        lines.append(f'- (b) {LABELS[name]}, hop 1: far {f:.1f} % (chance {CHANCE:.0f} %), nearest bin '
                     f'{bin_name(*near)} px {n:.1f} % vs {of_what} {target:.1f} % '
                     f"({'passes' if ok else 'FAILS'}: far <= {CHANCE + 10:.0f} %, near within 5 points)")
    return lines


def iterations(rows: list[dict]) -> str:
    """The runs' training iterations, e.g. ``2000`` (``1000-2000`` if they differ)."""
    lo, hi = min(r['iters'] for r in rows), max(r['iters'] for r in rows)
    return str(lo) if lo == hi else f'{lo}-{hi}'


def markdown(rows: list[dict], note: str = '') -> str:
    """The document: per difficulty, accuracy by distance bin and by hop count, the controls, the cost."""
    out = ['# Long-range probe', '',
           'Written by `tools/long_range.py` (`make long-range`). Pixel accuracy (%) of the distance-controlled '
           'lookup (`projects/lisa/synthetic/long_range.py`) on the validation images, per distance to the cue '
           '(px; 4 px = one token) and per hop count (cue -> relay -> ... -> targets), mean ± sample std over '
           f'the seeds. Chance is {CHANCE:.0f} %. One recipe for all attentions '
           f'(`configs/long_range/`: 1-layer ViT, width 64, patch 4, 1x1 head, {iterations(rows)} iterations); '
           'they differ in `attn_cfgs` only.', '']
    if note:
        out += [note, '']
    attentions = [a for a in ALL if any(r['attention'] == a for r in rows)]
    for difficulty in sorted({r['difficulty'] for r in rows}):
        sub = [r for r in rows if r['difficulty'] == difficulty]
        bins = bins_of(sub)
        hops = sorted({r['hops'] for r in sub})
        seeds = sorted({r['seed'] for r in sub})
        out += [f'## {difficulty} (seeds {", ".join(map(str, seeds))})', '', '### By distance to the cue (all hops)',
                '', '| attention | ' + ' | '.join(f'{bin_name(*b)} px' for b in bins) + ' | all |',
                '|---' * (len(bins) + 2) + '|']
        for a in attentions:
            mine = [r for r in sub if r['attention'] == a]
            if mine:
                out.append(f'| {LABELS[a]} | ' + ' | '.join(
                    cell(accuracy(mine, lambda r, b=b: (r['lo'], r['hi']) == b)) for b in bins)
                    + f' | {cell(accuracy(mine, lambda r: True))} |')
        out += ['', f'### By hop count (far bins: distance >= {FAR_MIN} px | all distances)', '',
                '| attention | ' + ' | '.join(f'{h} hop{"s" * (h > 1)}, far | {h}, all' for h in hops) + ' |',
                '|---' * (2 * len(hops) + 1) + '|']
        for a in attentions:
            mine = [r for r in sub if r['attention'] == a]
            if mine:
                out.append(f'| {LABELS[a]} | ' + ' | '.join(
                    f"{cell(accuracy(mine, lambda r, h=h: r['hops'] == h and r['lo'] >= FAR_MIN))} | "
                    f"{cell(accuracy(mine, lambda r, h=h: r['hops'] == h))}" for h in hops) + ' |')
        if 1 in hops:
            out += ['', '### Controls', '', *controls(sub)]
        out += ['', '### Training cost (per run: wall time of tools/train.py, mean time per iteration)', '',
                '| attention | iterations | s per run | s per iteration |', '|---|---|---|---|']
        for a in attentions:
            runs = {(r['seed']): r for r in sub if r['attention'] == a}
            if runs:
                out.append(f"| {LABELS[a]} | {iterations(list(runs.values()))} | "
                           f"{statistics.fmean(r['seconds'] for r in runs.values()):.0f} | "
                           f"{statistics.fmean(r['s_per_iter'] for r in runs.values()):.3f} |")
        out.append('')
    return '\n'.join(out)


def plot(rows: list[dict], path: Path) -> None:
    """Accuracy against distance, one line per attention (mean ± std), one panel per difficulty and hop."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = sorted({(r['difficulty'], r['hops']) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (difficulty, h) in zip(axes[0], panels):
        sub = [r for r in rows if r['difficulty'] == difficulty and r['hops'] == h]
        bins = bins_of(sub)
        centres = [(lo + min(hi, lo + 32)) / 2 for lo, hi in bins]
        for a in ALL:
            mine = [r for r in sub if r['attention'] == a]
            if not mine:
                continue
            stats = [mean_std(accuracy(mine, lambda r, b=b: (r['lo'], r['hi']) == b)) for b in bins]
            ax.errorbar(centres, [m for m, _ in stats], yerr=[0 if math.isnan(s) else s for _, s in stats],
                        marker='o', capsize=3, label=LABELS[a])
        ax.axhline(CHANCE, color='grey', linestyle=':')
        ax.set(title=f'{difficulty}, {h} hop{"s" * (h > 1)}', xlabel='distance to the cue (px)',
               ylabel='pixel accuracy (%)', ylim=(40, 101))
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--setting', choices=sorted(SETTINGS), default='quick')
    parser.add_argument('--attentions', nargs='+', choices=ALL, help='default: those of the setting')
    parser.add_argument('--difficulties', nargs='+', help='default: all of the setting (quick: hops1 hops2)')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--max-iters', type=int, help="training iterations (default: the config's)")
    parser.add_argument('--threads', type=int, default=1, help='torch threads per training run')
    parser.add_argument('--jobs', type=int, default=1, help='training runs at a time (one process each)')
    parser.add_argument('--data-root', type=Path, default=ROOT / 'data' / 'long_range')
    parser.add_argument('--work-dir', type=Path, default=ROOT / 'work_dirs' / 'long_range')
    parser.add_argument('--markdown', type=Path, default=ROOT / 'docs' / 'long_range.md')
    parser.add_argument('--note', default='', help='a line for the document (e.g. the machine and its load)')
    parser.add_argument('--from-rows', type=Path, nargs='+',
                        help='only write the document from these stored rows (of one or more sweeps)')
    parser.add_argument('--generate-only', action='store_true', help='only write the probe data')
    parser.add_argument('--task', choices=('lookup', *PATHFINDER), default='lookup',
                        help='data to write; the sweep runs the lookup (pathfinder: with --generate-only, for '
                             'configs/long_range/pathfinder-*.py)')
    args = parser.parse_args(argv)
    if args.task != 'lookup' and not args.generate_only:
        parser.error(f'--task {args.task} needs --generate-only (the sweep runs the lookup probe)')
    if min(args.threads, args.jobs) < 1 or (args.max_iters is not None and args.max_iters < 1):
        parser.error(f'--threads {args.threads}, --jobs {args.jobs} and --max-iters {args.max_iters} must be >= 1')
    missing = [str(p) for p in args.from_rows or () if not p.is_file()]
    if missing:
        parser.error(f'--from-rows {" ".join(missing)}: no such file')
    unknown = sorted(set(args.difficulties or ()) - set(SETTINGS[args.setting]['difficulties']))
    if unknown:
        parser.error(f'--difficulties {" ".join(unknown)}: the {args.setting} setting has '
                     f'{" ".join(SETTINGS[args.setting]["difficulties"])}')
    return args


def write_document(rows: list[dict], markdown_path: Path, note: str) -> None:
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(markdown(rows, note))
    png = markdown_path.with_suffix('.png')
    plot(rows, png)
    with markdown_path.open('a') as f:
        f.write(f'![accuracy against distance]({png.name})\n')
    print(f'wrote {markdown_path} and {png}')


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_rows:
        write_document([r for p in args.from_rows for r in json.loads(p.read_text())], args.markdown, args.note)
        return
    setting = SETTINGS[args.setting]
    if args.task != 'lookup':
        print(write_probe(args.task, args.data_root / args.task, setting['num_train'], setting['num_val'],
                          seed=0, **PATHFINDER[args.task]))
        return
    roots = {name: write_probe('lookup', args.data_root / f'lookup_{name}', setting['num_train'],
                               setting['num_val'], seed=0, **params)
             for name, params in setting['difficulties'].items() if name in (args.difficulties or [name])}
    if args.generate_only:
        print('\n'.join(f'{name}: {root}' for name, root in roots.items()))
        return
    rows_path = args.work_dir / 'rows.json'
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    runs = [(attention, difficulty, root, seed) for difficulty, root in roots.items()
            for attention in args.attentions or setting['attentions'] for seed in args.seeds]
    start = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:  # each run is its own tools/train.py process
        futures = {pool.submit(run_one, a, d, root, seed, args.work_dir, args.threads, args.max_iters): (a, d, seed)
                   for a, d, root, seed in runs}
        for future in as_completed(futures):
            attention, difficulty, seed = futures[future]
            new = future.result()
            rows += new
            rows_path.write_text(json.dumps(rows))
            print(f"{difficulty} {attention} seed {seed}: {new[0]['seconds']:.0f} s, pixel accuracy "
                  f'{cell(accuracy(new, lambda r: True))} %', flush=True)
    minutes = (time.perf_counter() - start) / 60
    note = ' '.join(filter(None, [args.note, f'Sweep: {len(runs)} runs, {args.jobs} at a time, '
                                  f'{args.threads} thread(s) each, {minutes:.0f} min wall.']))
    write_document(rows, args.markdown, note)


if __name__ == '__main__':
    main()
