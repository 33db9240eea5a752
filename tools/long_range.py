"""Does an attention carry information farther than one hop? The long-range probe sweep.

    python tools/long_range.py [--setting make|quick] [--tasks NAME ...] [--attentions NAME ...]
        [--layers 1 2] [--runs 8] [--lrs 1e-3 2e-3 4e-3] [--jobs 2] [--threads 1]
    python tools/long_range.py --from-rows work_dirs/long_range/rows.jsonl --markdown docs/long_range.md

Protocol (``projects/lisa/analysis/long_range.py`` reports it). Run ``r`` trains with seed ``r`` on
data the generator draws with seed ``r`` (``projects/lisa/synthetic/long_range.py``), the same
draws for every attention, so that comparisons are paired by run. Each attention's learning rate
is chosen per task among ``--lrs`` by the mean accuracy of ``--select-runs`` runs on development
draws (runs 900, 901, ...; their held-out images) at the config's budget; the reported ``--runs``
runs use other draws (runs ``--first-run``, ...) and report accuracy on their held-out images, which
no choice saw (``--max-iters`` trains them longer with the same lr: does the budget change the ranking?).
Each run is ``tools/train.py`` on the task's config with the attention's ``attn_cfgs`` (taken from
``configs/long_range/lookup_vit-1l_<attention>_64px.py``), ``--layers`` layers and the chosen lr,
one process with ``--threads`` threads, ``--jobs`` at a time. Rows go to ``<work-dir>/rows.jsonl``
(or ``--rows``) as runs finish, run by run; a second call skips the runs already there, so a sweep
resumes where it stopped (``make long-range`` keeps them in ``docs/long_range_rows.jsonl``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from mmengine.config import Config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from projects.lisa.analysis import long_range as report  # noqa: E402
from projects.lisa.synthetic.long_range import write_probe  # noqa: E402
from tools.report_seeds import run_metric  # noqa: E402

ATTENTION_CONFIG = 'configs/long_range/lookup_vit-1l_{}_64px.py'
ATTENTIONS = tuple(report.LABELS)
COMPARED = ('softmax', 'flatten', 'lisa', 'lisa-t2', 'lisa-global')
TASKS = {  # generator, its parameters, the task's config, chance (%)
    'lookup-hops1': ('lookup', dict(size=64, hops=(1, 1)), 'configs/long_range/lookup_vit-1l_softmax_64px.py', 50.0),
    'lookup-hops2': ('lookup', dict(size=64, hops=(2, 2)), 'configs/long_range/lookup_vit-1l_softmax_64px.py', 50.0),
    'pathfinder-seg': ('pathfinder_seg', dict(size=64), 'configs/long_range/pathfinder-seg_vit-1l_lisa_64px.py', 50.0),
    'pathfinder-cls': ('pathfinder_cls', dict(size=64), 'configs/long_range/pathfinder-cls_vit-1l_lisa_64px.py', 50.0),
}
SETTINGS = {  # task: (attentions, layers, reported runs); lrs, development runs per lr, images per draw
    'make': dict(tasks={'lookup-hops1': (('softmax', 'window', 'lisa-local'), (1,), 3),  # the controls
                        **{t: (COMPARED, (1, 2), 8) for t in TASKS if t != 'lookup-hops1'}},
                 lrs=(1e-3, 2e-3, 4e-3), select_runs=2, num_train=2000, num_val=200),
    'quick': dict(tasks={'lookup-hops1': (('softmax', 'lisa-local'), (1,), 2),
                         'lookup-hops2': (('lisa', 'lisa-t2'), (1,), 2)},
                  lrs=(2e-3,), select_runs=0, num_train=200, num_val=50),
}
DEV_RUN = 900
LOCK = threading.Lock()


def data_for(task: str, run: int, data_root: Path, num_train: int, num_val: int) -> Path:
    generator, params, _, _ = TASKS[task]
    return write_probe(generator, data_root / task / f'draw{run}', num_train, num_val, seed=run, **params)


def parameter_count(config: Path) -> int:
    """Trainable parameters of the config's model (built on the CPU in the config's default scope)."""
    from mmengine.registry import MODELS, DefaultScope
    with LOCK:  # Config.fromfile as in write_config; the default scope is global
        cfg = Config.fromfile(config)
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            return sum(p.numel() for p in MODELS.build(cfg.model).parameters() if p.requires_grad)


def write_config(item: dict, run_dir: Path) -> Path:
    """``run_dir/config.py``: the task's config with the attention's ``attn_cfgs``, the layer count and the lr."""
    with LOCK:  # Config.fromfile resolves 'mmseg::' through pkg_resources, which is not thread-safe
        attn = Config.fromfile(ROOT / ATTENTION_CONFIG.format(item['attention'])).model.backbone.attn_cfgs.to_dict()
    config = run_dir / 'config.py'
    config.write_text(f"_base_ = ['{ROOT / TASKS[item['task']][2]}']\n"
                      f"model = dict(backbone=dict(attn_cfgs=dict(_delete_=True, **{attn!r}), "
                      f"arch=dict(num_layers={item['layers']})))\n"
                      f"optim_wrapper = dict(optimizer=dict(lr={item['lr']!r}))\n")
    return config


def run_one(item: dict, data: Path, work_dir: Path, threads: int) -> list[dict]:
    """Train one run with tools/train.py; return its rows (one per hop count and distance bin)."""
    task, attention, layers, lr, run, iters = (item[k] for k in ('task', 'attention', 'layers', 'lr', 'run', 'iters'))
    run_dir = work_dir / task / f'{attention}-{layers}l' / f'lr{lr:g}-{iters}it' / f"{item['phase']}{run}"
    run_dir.mkdir(parents=True, exist_ok=True)
    config = write_config(item, run_dir)
    counts, seg = run_dir / 'long_range.json', TASKS[task][0] != 'pathfinder_cls'
    options = [f'randomness.seed={run}', f'train_dataloader.dataset.data_root={data}',
               f'val_dataloader.dataset.data_root={data}', f'train_cfg.max_iters={iters}',
               f'train_cfg.val_interval={iters}', f'param_scheduler.1.end={iters}',
               f'default_hooks.checkpoint.interval={iters}'] + ([f'val_evaluator.out_file={counts}'] if seg else [])
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads)}
    start = time.perf_counter()
    with (run_dir / 'train.log').open('w') as out:
        done = subprocess.run([sys.executable, 'tools/train.py', str(config), '--work-dir', str(run_dir),
                               '--cfg-options', *options], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode or (seg and not counts.is_file()):
        raise RuntimeError(f'{task} {attention} run {run} failed (exit {done.returncode}); see {run_dir}/train.log')
    seconds = time.perf_counter() - start
    step = [json.loads(line)['time'] for p in run_dir.glob('*/vis_data/scalars.json')
            for line in p.read_text().splitlines() if '"time"' in line and '"loss"' in line]
    if seg:
        cells = json.loads(counts.read_text())
    else:  # classification: one cell, the held-out images
        total = len(list((data / 'val').glob('*/*.png')))
        top1 = run_metric(run_dir, 'accuracy/top1', 'last')
        cells = [dict(hops=0, lo=0, hi=0, correct=round(top1 * total / 100), total=total)]
    common = dict(item, seconds=seconds, s_per_iter=sum(step) / len(step) if step else float('nan'),
                  params=parameter_count(config))
    return [dict(common, **cell) for cell in cells]


def key(item: dict) -> tuple:
    return tuple(item[k] for k in ('task', 'phase', 'attention', 'layers', 'lr', 'run', 'iters'))


def execute(items: list[dict], rows: list[dict], rows_path: Path, args: argparse.Namespace, setting: dict) -> None:
    """Run the items not yet in ``rows``, ``--jobs`` at a time; append each run's rows as it ends."""
    done = {key(r) for r in rows}
    todo = [i for i in items if key(i) not in done]
    draws = {(i['task'], i['run']): data_for(i['task'], i['run'], args.data_root, setting['num_train'],
                                             setting['num_val']) for i in todo}  # written before the runs start

    def one(item: dict) -> None:
        new = run_one(item, draws[item['task'], item['run']], args.work_dir, args.threads)
        with LOCK, rows_path.open('a') as f:
            f.writelines(json.dumps(r) + '\n' for r in new)
            rows.extend(new)
        print(f"{item['task']} {item['attention']} x{item['layers']} lr {item['lr']:g} {item['phase']} run "
              f"{item['run']}: {report.per_run(new)[item['run']]:.1f} % in {new[0]['seconds']:.0f} s", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(one, item) for item in todo]
        for future in as_completed(futures):
            if future.exception():  # stop at the first failure: the runs under way end, the rest do not start
                for f in futures:
                    f.cancel()
                raise future.exception()


def plan(args: argparse.Namespace, setting: dict, phase: str, lrs: dict | None = None) -> list[dict]:
    items = []
    for task, (attentions, layer_counts, runs) in setting['tasks'].items():
        if args.tasks and task not in args.tasks:
            continue
        default = Config.fromfile(ROOT / TASKS[task][2]).train_cfg.max_iters  # the lr is chosen at this budget
        for attention in args.attentions or attentions:
            for layers in args.layers or layer_counts:
                if phase == 'select':
                    items += [dict(task=task, phase=phase, attention=attention, layers=layers, lr=lr,
                                   run=DEV_RUN + i, iters=default)
                              for lr in args.lrs or setting['lrs'] for i in range(args.select_runs)]
                else:
                    lr = lrs.get((task, attention, layers), (args.lrs or setting['lrs'])[0])
                    items += [dict(task=task, phase=phase, attention=attention, layers=layers, lr=lr,
                                   run=args.first_run + i, iters=args.max_iters or default)
                              for i in range(args.runs or runs)]
    return sorted(items, key=lambda i: i['run'])  # run by run: a stopped sweep leaves whole paired sets


def write_document(rows: list[dict], path: Path, note: str) -> None:
    tasks = {t: [r for r in rows if r['task'] == t] for t in TASKS if any(r['task'] == t for r in rows)}
    window = Config.fromfile(ROOT / ATTENTION_CONFIG.format('window'))
    ceiling = report.window_ceiling(window.img_size // window.model.backbone.patch_size,
                                    window.model.backbone.attn_cfgs.window_size, 50.0)
    out = ['# Long-range probe', '', 'Written by `tools/long_range.py` (`make long-range`); protocol in its '
           'docstring. One recipe for all attentions (`configs/long_range/`: ViT of width 64, patch 4, 1x1 head); '
           'they differ in `attn_cfgs` (and the layer count where stated). `LiSA T=1` is the self-loop alone '
           '(no global path); `T=2` adds one step of S and is the control for the walk.', '']
    out += [note, ''] if note else []
    out += ['## Findings', '', 'Only the paired differences whose 95 % interval excludes 0 are stated as findings.',
            '', *report.findings(tasks), '']
    for task, task_rows in tasks.items():
        out += report.task_section(task, task_rows, TASKS[task][3], ceiling if task == 'lookup-hops1' else None)
    png = path.with_suffix('.png')
    out.append(f'![accuracy per run, mean and 95 % interval]({png.name})')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n'.join(out) + '\n')
    report.plot(tasks, png)
    print(f'wrote {path} and {png}')


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--setting', choices=sorted(SETTINGS), default='make')
    parser.add_argument('--tasks', nargs='+', choices=sorted(TASKS), help="default: the setting's")
    parser.add_argument('--attentions', nargs='+', choices=ATTENTIONS, help="default: the setting's, per task")
    parser.add_argument('--layers', nargs='+', type=int, help="default: the setting's, per task")
    parser.add_argument('--runs', type=int, help="reported runs per attention (default: the setting's, per task)")
    parser.add_argument('--first-run', type=int, default=1000, help='seed and data draw of the first reported run')
    parser.add_argument('--lrs', nargs='+', type=float, help='learning-rate candidates (one: no choice)')
    parser.add_argument('--select-runs', type=int, help='development runs per candidate lr')
    parser.add_argument('--max-iters', type=int,
                        help="reported runs' training iterations (default: the config's, where the lr is chosen)")
    parser.add_argument('--threads', type=int, default=1, help='torch threads per training run')
    parser.add_argument('--jobs', type=int, default=1, help='training runs at a time (one process each)')
    parser.add_argument('--data-root', type=Path, default=ROOT / 'data' / 'long_range')
    parser.add_argument('--work-dir', type=Path, default=ROOT / 'work_dirs' / 'long_range')
    parser.add_argument('--markdown', type=Path, default=ROOT / 'docs' / 'long_range.md')
    parser.add_argument('--note', default='', help='a line for the document (e.g. the machine and its load)')
    parser.add_argument('--rows', type=Path, help='where the rows are kept and resumed from '
                        '(default: <work-dir>/rows.jsonl)')
    parser.add_argument('--from-rows', type=Path, nargs='+', help='only write the document from these stored rows')
    parser.add_argument('--generate-only', action='store_true', help="only write the reported runs' data draws")
    args = parser.parse_args(argv)
    setting = SETTINGS[args.setting]
    args.select_runs = setting['select_runs'] if args.select_runs is None else args.select_runs
    for name in ('runs', 'threads', 'jobs', 'max_iters', 'layers'):
        values = getattr(args, name)
        bad = [v for v in (values if isinstance(values, list) else [values]) if v is not None and v < 1]
        if bad:
            parser.error(f'--{name.replace("_", "-")} {bad[0]}: must be >= 1')
    if args.select_runs < 0 or (len(args.lrs or setting['lrs']) > 1 and args.select_runs < 1):
        parser.error(f'--select-runs {args.select_runs}: choosing among several --lrs needs >= 1 run per lr')
    if any(lr <= 0 for lr in args.lrs or ()):
        parser.error(f'--lrs {" ".join(map(str, args.lrs))}: learning rates must be > 0')
    missing = [str(p) for p in args.from_rows or () if not p.is_file()]
    if missing:
        parser.error(f'--from-rows {" ".join(missing)}: no such file')
    unknown = sorted(set(args.tasks or ()) - set(setting['tasks']))
    if unknown:
        parser.error(f'--tasks {" ".join(unknown)}: the {args.setting} setting has {" ".join(setting["tasks"])}')
    return args


def read_rows(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.from_rows:
        write_document(read_rows(args.from_rows), args.markdown, args.note)
        return
    setting = SETTINGS[args.setting]
    if args.generate_only:
        for item in plan(args, setting, 'test'):
            print(data_for(item['task'], item['run'], args.data_root, setting['num_train'], setting['num_val']))
        return
    rows_path = args.rows or args.work_dir / 'rows.jsonl'
    rows_path.parent.mkdir(parents=True, exist_ok=True)
    rows = read_rows([rows_path]) if rows_path.is_file() else []
    start = time.perf_counter()
    selection = plan(args, setting, 'select') if len(args.lrs or setting['lrs']) > 1 else []
    execute(selection, rows, rows_path, args, setting)
    chosen = report.chosen_lrs(rows) if selection else {}  # one --lrs value: that lr
    execute(plan(args, setting, 'test', chosen), rows, rows_path, args, setting)
    minutes = (time.perf_counter() - start) / 60
    note = ' '.join(filter(None, [args.note, f'This call: {minutes:.0f} min wall, {args.jobs} run(s) at a time, '
                                  f'{args.threads} thread(s) each.']))
    write_document(rows, args.markdown, note)


if __name__ == '__main__':
    main()
