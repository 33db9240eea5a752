"""The training-dynamics study: which runs it trains, how, and their rows (``tools/training_dynamics.py``).

Protocol. Semantic FPN with PVT-T, FLatten-PVT-T or LiSA-PVT-T, trained from scratch by the study's configs
(``configs/segmentation/dynamics/``: the demo's recipe, 200 iterations of 4 images at 96 px), one
``tools/train.py`` process per run. Run ``r`` trains with seed ``r`` on draw ``r`` of the dataset
(:mod:`.draws`), the same draw for every model, so that comparisons are paired by run.

- ``select``: every candidate learning rate on the development draws (900, 901, ...); per dataset and
  backbone the one with the best mean mIoU (the smallest of equals) is chosen;
- ``test``: each backbone at its chosen lr on the test draws (1000, ...), which no choice saw;
- ``longer``: the same at twice the iterations (does the budget change the ranking?);
- ``ablate``: LiSA-PVT-T with one part switched off or reset (:data:`ABLATIONS`) at LiSA's chosen lr,
  on the test draws;
- ``softmax-start``: every backbone starts from the same softmax PVT-T, pretrained once as the demo
  pretrains its classifier (:data:`PRETRAIN_CONFIG`, the generated ImageNet, seed 0): every tensor the
  models share is loaded, the kernel attentions' own tensors start as from scratch
  (``allow_new=['lisa_from_softmax']``), the spatial reductions are left unused; then as ``test``.

Rows are appended as runs end, and a second call skips the runs already stored: a stopped study resumes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis.scalars import run_metric, training_values
from ..long_range.sweep import run_pool
from ..synthetic import generate
from .draws import write_draw

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = {'generated': 'configs/segmentation/dynamics/fpn_lisa-pvt-t_1xb4-200iter_scratch-synthetic-ade20k-96x96.py',
           'nuclei': 'configs/segmentation/dynamics/fpn_lisa-pvt-t_1xb4-200iter_scratch-nuclei-96x96.py'}
BACKBONES = {
    'pvt-t': [dict(type='softmax', sr_ratio=r) for r in (8, 4, 2, 1)],
    'flatten-pvt-t': dict(type='flatten'),
    'lisa-pvt-t': dict(type='lisa'),
}
"""Each backbone's ``attn_cfgs`` (``configs/_base_/models/pvt.py``'s rows)."""
LABELS = {'pvt-t': 'PVT-T', 'flatten-pvt-t': 'FLatten-PVT-T', 'lisa-pvt-t': 'LiSA-PVT-T'}
ABLATIONS = {
    'local-off': (dict(use_local=False), 'no local branch (walk only)'),
    'walk-off': (dict(use_global=False), 'no walk (local branch only)'),
    'geometric-steps': (dict(step_weights='geometric'), 'geometric step weights instead of adaptive'),
    'focusing-off': (dict(focusing=False), 'no focusing function'),
    'dwc-off': (dict(dwc=False), 'no depthwise conv'),
    'alpha-0.1': (dict(alpha_init=0.1), 'alpha starts at 0.1 (mostly local) instead of 0.5'),
    'alpha-0.9': (dict(alpha_init=0.9), 'alpha starts at 0.9 (mostly global) instead of 0.5'),
}
"""LiSA-PVT-T's variants: ``attn_cfgs`` merged into LiSA's, and what they change."""
PRETRAIN_CONFIG = 'configs/classification/demo/pvt-tiny_lisa_1xb8-2e_synthetic-imagenet-64px.py'
PRETRAIN_DATA = dict(num_train=200, num_val=50, size=64, seed=0)
"""``tools/demo.py``'s generated ImageNet, which the pretraining config expects."""
LRS = (1e-4, 3e-4, 1e-3)
DEV_DRAW, TEST_DRAW = 900, 1000
PHASES = ('select', 'test', 'longer', 'ablate', 'softmax-start')
LOCK = threading.Lock()


@dataclass(frozen=True)
class Plan:
    """What a call runs: datasets, phases, lr candidates, development and test draws per variant, and the
    base budget (``longer`` doubles it)."""

    datasets: tuple[str, ...] = ('nuclei', 'generated')
    phases: tuple[str, ...] = PHASES
    lrs: tuple[float, ...] = LRS
    dev_draws: int = 2
    test_draws: int = 6
    iters: int = 200
    ablations: tuple[str, ...] = tuple(ABLATIONS)


def key(item: dict) -> tuple:
    return tuple(item[k] for k in ('dataset', 'phase', 'backbone', 'variant', 'lr', 'draw', 'iters'))


def chosen_lrs(rows: Sequence[dict]) -> dict[tuple[str, str], float]:
    """``{(dataset, backbone): lr}``: the candidate with the best mean development mIoU, the smallest of
    equals."""
    means: dict[tuple[str, str], dict[float, list[float]]] = {}
    for r in rows:
        if r['phase'] == 'select':
            means.setdefault((r['dataset'], r['backbone']), {}).setdefault(r['lr'], []).append(r['mIoU'])
    return {k: max(sorted(by_lr), key=lambda lr: sum(by_lr[lr]) / len(by_lr[lr])) for k, by_lr in means.items()}


def items_of(phase: str, plan: Plan, chosen: dict[tuple[str, str], float]) -> list[dict]:
    """The runs of ``phase``, draw by draw (a stopped study leaves whole paired sets). The phases after
    ``select`` need the lrs it chose (``chosen``); a backbone without one is left out."""
    items = []
    for dataset in plan.datasets:
        for backbone in BACKBONES:
            common = dict(dataset=dataset, phase=phase, backbone=backbone, variant='')
            if phase == 'select':
                items += [dict(common, lr=lr, draw=DEV_DRAW + i, iters=plan.iters)
                          for lr in plan.lrs for i in range(plan.dev_draws)]
            elif (dataset, backbone) in chosen and (phase != 'ablate' or backbone == 'lisa-pvt-t'):
                variants = plan.ablations if phase == 'ablate' else ('', )
                items += [dict(common, variant=v, lr=chosen[dataset, backbone], draw=TEST_DRAW + i,
                               iters=plan.iters * (2 if phase == 'longer' else 1))
                          for v in variants for i in range(plan.test_draws)]
    return sorted(items, key=lambda i: i['draw'])


def attn_cfgs(item: dict) -> dict | list:
    base = BACKBONES[item['backbone']]
    return dict(base, **ABLATIONS[item['variant']][0]) if item['variant'] else base


def init_cfg(item: dict, pretrained: Path | None) -> dict | None:
    """The backbone's ``init_cfg``: None from scratch, else the softmax checkpoint."""
    if item['phase'] != 'softmax-start':
        return None
    if pretrained is None:
        raise ValueError('a softmax-start run needs the pretrained softmax checkpoint (pretrained=...)')
    allow_new = [] if item['backbone'] == 'pvt-t' else ['lisa_from_softmax']
    return dict(_delete_=True, type='Pretrained', checkpoint=str(pretrained), prefix='backbone.', allow_new=allow_new)


def write_config(item: dict, run_dir: Path, data_root: Path, pretrained: Path | None = None) -> Path:
    """``run_dir/config.py``: the dataset's study config with the run's attention, start, lr, data and budget."""
    iters = item['iters']
    config = run_dir / 'config.py'
    config.write_text(
        f"_base_ = ['{ROOT / CONFIGS[item['dataset']]}']\n"
        f"model = dict(backbone=dict(attn_cfgs={attn_cfgs(item)!r}, init_cfg={init_cfg(item, pretrained)!r}))\n"
        f"optim_wrapper = dict(optimizer=dict(lr={item['lr']!r}))\n"
        f"param_scheduler = [dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end={iters}, by_epoch=False)]\n"
        f"train_cfg = dict(max_iters={iters}, val_interval={iters})\n"
        f"default_hooks = dict(checkpoint=dict(interval={iters}), logger=dict(interval={min(10, iters)}))\n"
        f"randomness = dict(seed={item['draw']})\n"
        f"train_dataloader = dict(dataset=dict(data_root='{data_root}'))\n"
        f"val_dataloader = dict(dataset=dict(data_root='{data_root}'))\n"
        'test_dataloader = val_dataloader\n')
    return config


def run_dir_of(item: dict, work_dir: Path) -> Path:
    name = item['backbone'] + (f"_{item['variant']}" if item['variant'] else '')
    return work_dir / item['dataset'] / name / f"lr{item['lr']:g}-{item['iters']}it" / f"{item['phase']}{item['draw']}"


def train(config: Path, run_dir: Path, threads: int, what: str) -> float:
    """``tools/train.py config`` into ``run_dir`` (emptied first: a run stopped half-way starts again) on
    ``threads`` threads; its seconds."""
    env = {**os.environ, 'OMP_NUM_THREADS': str(threads), 'MKL_NUM_THREADS': str(threads),
           'PYTHONPATH': os.pathsep.join(filter(None, [str(ROOT), os.environ.get('PYTHONPATH')]))}
    start = time.perf_counter()
    with (run_dir / 'train.log').open('w') as out:
        done = subprocess.run([sys.executable, 'tools/train.py', str(config), '--work-dir', str(run_dir)],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f'{what} failed (exit {done.returncode}); see {run_dir}/train.log')
    return round(time.perf_counter() - start, 1)


def fresh(run_dir: Path) -> Path:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return run_dir


def run_one(item: dict, data_root: Path, work_dir: Path, threads: int, keep_checkpoints: bool,
            pretrained: Path | None = None) -> dict:
    """Train and validate one run; its row (metrics, loss curve, time)."""
    run_dir = fresh(run_dir_of(item, work_dir))
    config = write_config(item, run_dir, data_root, pretrained)
    seconds = train(config, run_dir, threads,
                    f"{item['dataset']} {item['phase']} {item['backbone']} {item['variant']} draw {item['draw']}")
    row = dict(item, seconds=seconds, **{m: run_metric(run_dir, m) for m in ('mIoU', 'mAcc', 'aAcc')},
               loss_step=training_values(run_dir, 'step'), loss=training_values(run_dir, 'loss'))
    if not keep_checkpoints:
        for checkpoint in run_dir.glob('*.pth'):
            checkpoint.unlink()
    return row


def pretrain_softmax(data: Path, work_dir: Path, threads: int) -> Path:
    """The softmax PVT-T classifier of ``softmax-start`` (:data:`PRETRAIN_CONFIG` with softmax attention),
    trained once; its checkpoint."""
    run_dir = work_dir / 'pretrain' / 'pvt-t_softmax'
    last = run_dir / 'last_checkpoint'
    if last.is_file() and Path(last.read_text().strip()).is_file():
        return Path(last.read_text().strip())
    root = generate('imagenet', data / 'imagenet', **PRETRAIN_DATA).root
    config = fresh(run_dir) / 'config.py'
    config.write_text(f"_base_ = ['{ROOT / PRETRAIN_CONFIG}']\n"
                      f"model = dict(backbone=dict(attn_cfgs={BACKBONES['pvt-t']!r}))\n"
                      f"train_dataloader = dict(dataset=dict(data_root='{root}'))\n"
                      f"val_dataloader = dict(dataset=dict(data_root='{root}'))\n"
                      'test_dataloader = val_dataloader\n')
    train(config, run_dir, threads, 'the softmax PVT-T pretraining')
    return Path(last.read_text().strip())


def execute(items: list[dict], rows: list[dict], rows_path: Path, data: Path, work_dir: Path, jobs: int,
            threads: int, wheel: Path | None, keep_checkpoints: bool = False,
            say: Callable[[str], None] = print) -> None:
    """Run the items not yet in ``rows``, ``jobs`` at a time; append each run's row as it ends; stop at the
    first failure (the runs under way end, the rest do not start)."""
    done = {key(r) for r in rows}
    todo = [i for i in items if key(i) not in done]
    roots = {(i['dataset'], i['draw']): write_draw(i['dataset'], data / i['dataset'] / f"draw{i['draw']}",
                                                    i['draw'], wheel) for i in todo}
    pretrained = (pretrain_softmax(data, work_dir, threads * jobs)
                  if any(i['phase'] == 'softmax-start' for i in todo) else None)

    def one(item: dict) -> None:
        row = run_one(item, roots[item['dataset'], item['draw']], work_dir, threads, keep_checkpoints, pretrained)
        with LOCK, rows_path.open('a') as f:
            f.write(json.dumps(row) + '\n')
            rows.append(row)
        say(f"{item['dataset']} {item['phase']} {item['backbone']} {item['variant'] or '-'} lr {item['lr']:g} "
            f"draw {item['draw']} {item['iters']} it: mIoU {row['mIoU']:.2f} in {row['seconds']:.0f} s")

    rows_path.parent.mkdir(parents=True, exist_ok=True)
    run_pool(one, todo, jobs)


def run_study(plan: Plan, rows_path: Path, data: Path, work_dir: Path, jobs: int = 2, threads: int = 1,
              wheel: Path | None = None, keep_checkpoints: bool = False) -> list[dict]:
    """The plan's phases in order (each phase after ``select`` uses the lrs it chose); returns every row."""
    rows = read_rows(rows_path)
    for phase in (p for p in PHASES if p in plan.phases):
        execute(items_of(phase, plan, chosen_lrs(rows)), rows, rows_path, data, work_dir, jobs, threads, wheel,
                keep_checkpoints)
    return rows


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
