"""The long-range probe sweep: which runs it trains, on which data and config, and their rows.

Protocol (the document states it: :func:`protocol`). Run ``r`` trains with seed ``r`` on data the
generator draws with seed ``r`` (:mod:`projects.lisa.long_range.tasks`), the same draws for every
attention, so that comparisons are paired by run. Each (task, attention, depth) chooses its learning
rate among the candidates by the mean accuracy of ``select_runs`` runs on development draws (runs 900,
901, ...; their held-out images) at the task config's budget; the reported runs use other draws (1000,
...) and report accuracy on their held-out images, which no choice saw; a longer ``max_iters`` trains
them longer with the same lr (does the budget change the ranking?). Each run is ``tools/train.py`` on
the task's config with the attention's ``attn_cfgs`` (from ``configs/long_range/lookup_vit-1l_<attention>
_64px.py``), the depth and the lr, one process each. Rows are appended as runs end, run by run, and a
second call skips the runs already stored: a stopped sweep resumes where it was.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from mmengine.config import Config

from ..analysis.scalars import run_metric, training_values
from . import report
from .tasks import write_probe

ROOT = Path(__file__).resolve().parents[3]
ATTENTION_CONFIG = 'configs/long_range/lookup_vit-1l_{}_64px.py'
DEV_RUN = 900
LOCK = threading.Lock()
"""MMEngine's ``Config.fromfile`` resolves ``'mmseg::'`` bases through pkg_resources, which is not
thread-safe: every read of a config in the sweep's threads holds this lock."""


@dataclass(frozen=True)
class Task:
    """A probe task: its generator and parameters, its config, chance (%), images per draw, the hop
    counts that score a run (None: all; the pointer probe mixes 1-hop queries in to be trainable and is
    scored on its 2-hop ones), and whether its classes weigh equally (Pathfinder segmentation: the
    distractor curves hold most pixels, so a model that answers 'distractor' everywhere would score
    their share, not chance)."""

    generator: str
    params: dict
    config: str
    chance: float
    num_train: int = 2000
    num_val: int = 200
    scored_hops: tuple[int, ...] | None = None
    balanced: bool = False
    far: tuple[str, report.Keep] = report.FAR


TASKS = {
    'lookup-hops1': Task('lookup', dict(size=64, hops=(1, 1)), 'configs/long_range/lookup_vit-1l_softmax_64px.py',
                         50.0),
    'lookup-hops2': Task('lookup', dict(size=64, hops=(2, 2)), 'configs/long_range/lookup_vit-1l_softmax_64px.py',
                         50.0),
    'pathfinder-seg': Task('pathfinder_seg', dict(size=64), 'configs/long_range/pathfinder-seg_vit-1l_lisa_64px.py',
                           50.0, balanced=True, far=report.MARKED_FAR),
    'pathfinder-cls': Task('pathfinder_cls', dict(size=64), 'configs/long_range/pathfinder-cls_vit-1l_lisa_64px.py',
                           50.0),
    'pointer': Task('pointer', dict(size=64, hops=(1, 2)), 'configs/long_range/pointer_vit-1l_softmax_64px.py',
                    10.0, num_train=10000, scored_hops=(2,)),
}
COMPARED = (('softmax', 1), ('flatten', 1), ('lisa', 1), ('lisa-t2', 1), ('lisa-global', 1),
            ('softmax', 2), ('flatten', 2))
"""The (attention, layers) of every compared task: LiSA T=3 and its controls in one layer (T=2: one step
of S, the walk's control; global-only: no local branch), and two layers of the one-hop attentions (can
one LiSA layer do what needs two of theirs?)."""
CONNECTIVITY = COMPARED + (('lisa-tinf', 1), )
"""Pathfinder's variants: :data:`COMPARED` and LiSA T=inf, ``(I - beta S)^-1``: connectivity is where the
paper claims the whole walk helps."""


@dataclass(frozen=True)
class Setting:
    """Per task its (attention, layers) variants and reported runs; the lr candidates, development runs
    per candidate, and a cap on images per draw (None: each task's own)."""

    tasks: dict[str, tuple[tuple[tuple[str, int], ...], int]]
    lrs: tuple[float, ...]
    select_runs: int
    max_images: tuple[int, int] | None = None


SETTINGS = {
    'make': Setting({'lookup-hops1': ((('softmax', 1), ('window', 1), ('lisa-local', 1)), 3),  # the controls
                     **{t: (CONNECTIVITY if t.startswith('pathfinder') else COMPARED, 8)
                        for t in TASKS if t != 'lookup-hops1'}},
                    lrs=(1e-3, 2e-3, 4e-3), select_runs=2),
    'quick': Setting({'lookup-hops1': ((('softmax', 1), ('lisa-local', 1)), 2),
                      'lookup-hops2': ((('lisa', 1), ('lisa-t2', 1)), 2)},
                     lrs=(2e-3,), select_runs=0, max_images=(200, 50)),
}


def images(task: str, setting: Setting) -> tuple[int, int]:
    """(train, val) images per draw of ``task`` under ``setting``."""
    own = TASKS[task].num_train, TASKS[task].num_val
    return own if setting.max_images is None else tuple(map(min, own, setting.max_images))


def data_for(task: str, run: int, data_root: Path, num_train: int, num_val: int) -> Path:
    """Run ``run``'s draw of ``task`` (written once; :func:`write_probe` keeps a folder of the same spec)."""
    spec = TASKS[task]
    return write_probe(spec.generator, data_root / task / f'draw{run}', num_train, num_val, seed=run, **spec.params)


def scored(rows: list[dict]) -> list[dict]:
    """The rows as they count towards a run's accuracy: of each task's :attr:`Task.scored_hops`, and for a
    :attr:`Task.balanced` task with counts weighted so that each label class holds an equal share of the
    run's total (its pixel accuracy becomes the mean of the per-class accuracies)::

        correct_r, total_r <- correct_r * N / (K N_c), total_r * N / (K N_c)   (row r of class c)

    with ``N`` the run's labelled pixels, ``N_c`` those of class ``c`` and ``K`` the classes present."""
    kept = [r for r in rows if TASKS.get(r['task']) is None or TASKS[r['task']].scored_hops is None
            or r['hops'] in TASKS[r['task']].scored_hops]
    totals: dict[tuple, dict[int, int]] = {}
    for r in kept:
        if r['task'] in TASKS and TASKS[r['task']].balanced:
            if 'label' not in r:
                raise ValueError(f"{r['task']} is scored class-balanced, but a row of run {r['run']} has no 'label' "
                                 '(rows without per-class counts): run it again')
            by_class = totals.setdefault(key(r), {})
            by_class[r['label']] = by_class.get(r['label'], 0) + r['total']
    out = []
    for r in kept:
        if key(r) in totals:
            by_class = totals[key(r)]
            weight = sum(by_class.values()) / (len(by_class) * by_class[r['label']])
            r = dict(r, correct=r['correct'] * weight, total=r['total'] * weight)
        out.append(r)
    return out


def parameter_count(config: Path) -> int:
    """Trainable parameters of the config's model (built on the CPU in the config's default scope)."""
    from mmengine.registry import MODELS, DefaultScope
    with LOCK:  # the default scope is global too
        cfg = Config.fromfile(config)
        with DefaultScope.overwrite_default_scope(cfg.default_scope):
            return sum(p.numel() for p in MODELS.build(cfg.model).parameters() if p.requires_grad)


def write_config(item: dict, run_dir: Path) -> Path:
    """``run_dir/config.py``: the task's config with the attention's ``attn_cfgs``, the layer count and the lr."""
    with LOCK:
        attn = Config.fromfile(ROOT / ATTENTION_CONFIG.format(item['attention'])).model.backbone.attn_cfgs.to_dict()
    config = run_dir / 'config.py'
    config.write_text(f"_base_ = ['{ROOT / TASKS[item['task']].config}']\n"
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
    counts, seg = run_dir / 'long_range.json', TASKS[task].generator != 'pathfinder_cls'
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
    step = training_values(run_dir, 'time')
    if seg:
        cells = json.loads(counts.read_text())
    else:  # classification: one cell, the held-out images
        labels = Counter(p.parent.name for p in (data / 'val').glob('*/*.png'))  # images per class folder
        total, top1 = labels.total(), run_metric(run_dir, 'accuracy/top1', 'last')
        cells = [dict(hops=0, lo=0, hi=0, correct=round(top1 * total / 100), total=total,
                      majority=max(labels.values()))]  # always naming the larger class scores this
    common = dict(item, seconds=seconds, s_per_iter=sum(step) / len(step) if step else float('nan'),
                  params=parameter_count(config))
    return [dict(common, **cell) for cell in cells]


def key(item: dict) -> tuple:
    return tuple(item[k] for k in ('task', 'phase', 'attention', 'layers', 'lr', 'run', 'iters'))


def default_iters(task: str) -> int:
    """The budget of ``task``'s config: its learning rate is chosen at it, and its test runs train it unless
    ``max_iters`` says otherwise."""
    return Config.fromfile(ROOT / TASKS[task].config).train_cfg.max_iters


def plan(setting: Setting, phase: str, *, tasks=None, attentions=None, layers=None, lrs=None, select_runs=None,
         runs=None, first_run: int = 1000, max_iters: int | None = None,
         chosen: dict | None = None) -> list[dict]:
    """The runs of ``phase`` ('select': every candidate lr on the development draws; 'test': the chosen
    lr, or the first candidate where none was chosen), run by run (a stopped sweep leaves whole paired
    sets). Per task, the setting's variants of depths ``layers``, or with ``attentions`` those attentions
    at each depth (``layers``, default the setting's depths for the task)."""
    lrs = lrs or setting.lrs
    select_runs = setting.select_runs if select_runs is None else select_runs
    items = []
    for task, (variants, task_runs) in setting.tasks.items():
        if tasks and task not in tasks:
            continue
        default = default_iters(task)
        depths = layers or sorted({d for _, d in variants})
        chosen_variants = ([(a, d) for a in attentions for d in depths] if attentions
                           else [(a, d) for a, d in variants if d in depths])
        for attention, depth in chosen_variants:
            common = dict(task=task, phase=phase, attention=attention, layers=depth)
            if phase == 'select':
                items += [dict(common, lr=lr, run=DEV_RUN + i, iters=default) for lr in lrs for i in range(select_runs)]
            else:
                lr = (chosen or {}).get((task, attention, depth), lrs[0])
                items += [dict(common, lr=lr, run=first_run + i, iters=max_iters or default)
                          for i in range(runs or task_runs)]
    return sorted(items, key=lambda i: i['run'])


def execute(items: list[dict], rows: list[dict], rows_path: Path, setting: Setting, data_root: Path,
            work_dir: Path, jobs: int, threads: int) -> None:
    """Run the items not yet in ``rows``, ``jobs`` at a time; append each run's rows as it ends; stop at
    the first failure (the runs under way end, the rest do not start)."""
    done = {key(r) for r in rows}
    todo = [i for i in items if key(i) not in done]
    draws = {(i['task'], i['run']): data_for(i['task'], i['run'], data_root, *images(i['task'], setting))
             for i in todo}  # written before the runs start

    def one(item: dict) -> None:
        new = run_one(item, draws[item['task'], item['run']], work_dir, threads)
        with LOCK, rows_path.open('a') as f:
            f.writelines(json.dumps(r) + '\n' for r in new)
            rows.extend(new)
        print(f"{item['task']} {item['attention']} x{item['layers']} lr {item['lr']:g} {item['phase']} run "
              f"{item['run']}: {report.per_run(scored(new))[item['run']]:.1f} % in {new[0]['seconds']:.0f} s",
              flush=True)

    run_pool(one, todo, jobs)


def run_pool(one: Callable[[dict], None], items: list[dict], jobs: int) -> None:
    """``one(item)`` for each item, ``jobs`` at a time; the first failure is raised once the runs under way
    end, and the items not yet started do not start."""
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(one, item) for item in items]
        for future in as_completed(futures):
            if future.exception():
                for f in futures:
                    f.cancel()
                raise future.exception()


def _span(values) -> str:
    """``'1000-1015'`` (``'3'`` for one value) of a set of integers."""
    lo, hi = min(values), max(values)
    return f'{lo}' if lo == hi else f'{lo}-{hi}'


def _grouped(parts: dict[str, tuple[str, str]]) -> str:
    """``{task: (own, shared)}`` as one clause per ``shared`` text: its tasks with their ``own`` text, then it."""
    by_shared: dict[str, list[str]] = {}
    for task, (own, shared) in parts.items():
        by_shared.setdefault(shared, []).append(f'{task} {own}'.strip())
    return '; '.join(f"{', '.join(names)}: {shared}" for shared, names in by_shared.items())


def protocol(tasks: dict[str, list[dict]], recipe: Config) -> list[str]:
    """The protocol as a numbered list: from this module's and :mod:`.report`'s constants, ``recipe`` (a task
    config) and what the rows hold (draws, candidates, budgets, run counts, run time)."""
    backbone = recipe.model.backbone
    test = {t: report.reported(rows) for t, rows in tasks.items()}
    chosen_at = {t: default_iters(t) for t in tasks}
    development = {}
    for task, rows in tasks.items():
        select = [r for r in rows if r['phase'] == 'select']
        if select:
            per_lr: dict[tuple, set[int]] = {}
            for r in select:
                per_lr.setdefault((r['attention'], r['layers'], r['lr']), set()).add(r['run'])
            development[task] = (f"{len({v[:2] for v in per_lr})} variants",
                                 f"{len({r['lr'] for r in select})} candidates x "
                                 f"{_span({len(runs) for runs in per_lr.values()})} runs per variant (draws "
                                 f"{', '.join(map(str, sorted({r['run'] for r in select})))}) at {chosen_at[task]} "
                                 'iterations')
    candidates = sorted({r['lr'] for rows in tasks.values() for r in rows if r['phase'] == 'select'})
    paired = {}
    for task, rows in test.items():
        at = [r for r in rows if r['iters'] == chosen_at[task]]
        per_variant = [{r['run'] for r in rs} for rs in report.variants(at).values()]
        paired[task] = ('', f"draws {_span({r['run'] for r in at})}, {_span({len(d) for d in per_variant})} per "
                            f'variant at {chosen_at[task]} iterations')
    again = [f'{task} at {_span({r["iters"] for r in rows if report.replicated(r)})} iterations'
             for task, rows in test.items() if report.replication(rows)]
    longer = []
    for task, rows in test.items():
        for iters in sorted({r['iters'] for r in rows} - {chosen_at[task]}):
            at = report.variants([r for r in rows if r['iters'] == iters])
            depths = '; '.join(f"{depth} layer{'s' * (depth > 1)}: "
                               + ', '.join(report.LABELS.get(v.attention, v.attention) for v in at if v.layers == depth)
                               for depth in sorted({v.layers for v in at}))
            longer.append(f"   - {task}, {iters} iterations, draws {_span({r['run'] for v in at for r in at[v]})}: "
                          f'{depths}')
    scored_on = [f"{t} on its {'/'.join(map(str, TASKS[t].scored_hops))}-hop queries" for t in tasks
                 if TASKS[t].scored_hops]
    balanced = [t for t in tasks if TASKS[t].balanced]
    far_columns: dict[str, list[str]] = {}  # as report.task_section: where the far rows are some of the rows
    for task, rows in test.items():
        title, keep = TASKS[task].far
        if any(keep(r) for r in rows) and not all(keep(r) for r in rows):
            far_columns.setdefault(title, []).append(task)
    every = [r for rows in tasks.values() for r in rows]
    seconds = {key(r): r['seconds'] for r in every}
    dropped = {key(r) for r in every if r['phase'] == 'test'} - {key(r) for r in report.reported(every)}
    by_lr = Counter(k[4] for k in dropped)  # key(): (task, phase, attention, layers, lr, ...)
    count = sum(len(report.comparisons(rows)) + len(report.replication(rows)) for rows in test.values())
    items = [
        f"Recipe: one for all attentions (`configs/long_range/`: ViT of width {backbone.arch['embed_dims']}, patch "
        f'{backbone.patch_size}, 1x1 head); they differ in `attn_cfgs` (and the layer count where stated). `LiSA '
        'T=1` is the self-loop alone (no global path); `T=2` adds one step of S and is the control for the walk.',
        f"Learning rate: per task, attention and depth the candidate ({', '.join(f'{lr:g}' for lr in candidates)}) "
        'with the best mean accuracy over development runs on their own draws (their held-out images), the '
        f'smallest of equals; local-only attentions ({", ".join(report.LABELS[a] for a in report.LOCAL)}) on the '
        'nearest bin, the only one they reach. Development runs: ' + _grouped(development) + '.',
        'Test runs, paired: run r trains with seed r on the generator\'s draw r, the same draw for every attention, '
        'at its chosen lr, and is scored on the draw\'s held-out images, which no choice saw. '
        + _grouped(paired) + '.',
        f'Replication: the test draws from {report.REPLICATION_FIRST} on were trained after the results on the '
        'earlier draws were read; their comparisons are tabled again alone'
        + (f" ({'; '.join(again)})" if again else ' (none ran)') + '.',
        'Budget checks, at the same lrs, longer' + (':\n' + '\n'.join(longer) if longer else ': none ran.'),
        f'Scoring: pixel accuracy (images for classification); a run solves a task at {report.SOLVED:g} %'
        + ''.join(f'; {s}' for s in scored_on)
        + (f"; {', '.join(balanced)} class-balanced (the mean of the classes' pixel accuracies)" if balanced else '')
        + ''.join(f"; far column on {', '.join(names)}: {title}" + (
            ' (a pixel far from the marker lies on a distractor)' if title == report.MARKED_FAR[0] else '')
            for title, names in far_columns.items()) + '.',
        'Statistics: mean and 95 % interval over the runs (Student t); differences paired by run, with their 95 % '
        f'interval, a difference stated only where it excludes 0; the {count} comparisons are not corrected for '
        'multiplicity.',
        f'Cost: summed run time {sum(seconds.values()) / 3600:.1f} core-hours over {len(seconds)} runs; the rows '
        f'also hold {len(dropped)} test runs at an lr that the choice did not keep'
        + (f" ({', '.join(f'{by_lr[lr]} at {lr:g}' for lr in sorted(by_lr))})" if dropped else '') + '.']
    return [line for i, item in enumerate(items, 1) for line in (f'{i}. {item}', '')]


def read_note(text: str) -> dict[str, list[str]]:
    """The sections of a note file: ``{name: lines}`` under each ``## name`` heading (``measurement`` or a
    task), their blank lines at either end dropped; what stands above the first heading is the file's own."""
    sections: dict[str, list[str]] = {}
    lines = None
    for line in text.splitlines():
        if line.startswith('## '):
            lines = sections.setdefault(line[3:].strip(), [])
        elif lines is not None:
            lines.append(line)
    unknown = sorted(set(sections) - {'measurement', *TASKS})
    if unknown:
        raise ValueError(f"note section(s) {', '.join(unknown)}: the sections are 'measurement' and the tasks "
                         f"({', '.join(TASKS)})")
    return {name: '\n'.join(lines).strip('\n').splitlines() for name, lines in sections.items()}


def write_document(rows: list[dict], path: Path, note: str = '',
                   command: str = '`tools/long_range.py` from the stored rows') -> dict[str, list[dict]]:
    """``path`` (markdown) and its plot from the stored rows, each task scored on its :attr:`Task.scored_hops`:
    the findings (:func:`report.summary`), the protocol, then one section per task; ``note`` (markdown,
    :func:`read_note`) adds what the rows do not hold, its ``measurement`` lines to the protocol and a task's
    lines to its section; ``command`` (what writes it) heads it. A task without test runs yet (its lr choice
    under way) is left out. Returns the scored rows of each task in it."""
    rows = scored(rows)
    tasks = {t: [r for r in rows if r['task'] == t] for t in TASKS
             if any(r['task'] == t and r['phase'] == 'test' for r in rows)}
    notes = read_note(note)
    window = Config.fromfile(ROOT / ATTENTION_CONFIG.format('window'))
    ceiling = report.window_ceiling(window.img_size // window.model.backbone.patch_size,
                                    window.model.backbone.attn_cfgs.window_size, 50.0)
    out = ['# Long-range probe', '', f'Written by {command}; the protocol\'s code is '
           '`projects/lisa/long_range/sweep.py`. Does one attention layer carry information farther than one hop?',
           '', '## Findings', '', *report.summary(tasks), '', '## Protocol', '', *protocol(tasks, window)]
    if notes.get('measurement'):
        out += ['Measurement:', '', *notes['measurement'], '']
    for task, task_rows in tasks.items():
        hops = TASKS[task].scored_hops
        section = report.task_section(task, task_rows, TASKS[task].chance,
                                      ceiling if task == 'lookup-hops1' else None, TASKS[task].far)
        if hops:
            section[2] += f" Scored on the {'/'.join(map(str, hops))}-hop queries."
        out += section
        if notes.get(task):
            out += ['### Notes', '', *notes[task], '']
    png = path.with_suffix('.png')
    out.append(f'![accuracy per run, mean and 95 % interval]({png.name})')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n'.join(out) + '\n')
    report.plot(tasks, png)
    print(f'wrote {path} and {png}')
    return tasks


def read_rows(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
