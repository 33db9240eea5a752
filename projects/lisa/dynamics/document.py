"""``docs/training_dynamics.md`` from the study's rows (:mod:`.study`): findings, protocol, tables and the
loss curves. Means over draws carry their 95 % Student-t interval; comparisons are paired by draw
(:func:`~projects.lisa.analysis.statistics.paired_difference`) and read "no difference found" where the
interval holds 0."""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from mmengine.config import Config

from ..analysis.statistics import Interval, mean_interval, paired_difference
from .draws import HELD_OUT, STARDIST, TILE
from .study import ABLATIONS, BACKBONES, CONFIGS, DEV_DRAW, LABELS, PHASES, ROOT, chosen_lrs

DATASET_TITLES = {
    'nuclei': 'cell nuclei (real)',
    'generated': 'generated ADE20K',
}
COMPARED = (('lisa-pvt-t', 'pvt-t'), ('lisa-pvt-t', 'flatten-pvt-t'), ('flatten-pvt-t', 'pvt-t'))
COLORS = {'pvt-t': 'C0', 'flatten-pvt-t': 'C1', 'lisa-pvt-t': 'C2'}
PHASE_TITLES = {'test': 'from scratch', 'longer': 'from scratch, twice the iterations',
                'softmax-start': 'from the same softmax PVT-T'}


def per_draw(rows: Sequence[dict], metric: str = 'mIoU') -> dict[int, float]:
    return {r['draw']: r[metric] for r in rows}


def select(rows: Sequence[dict], **match) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def label(backbone: str, variant: str = '') -> str:
    return LABELS[backbone] + (f' {variant}' if variant else '')


def cell(d: Interval, signed: bool = True, digits: int = 2) -> str:
    """A paired difference, **bold** where its interval excludes 0."""
    text = d.format(digits, signed=signed)
    return f'**{text}**' if signed and d.excludes_zero else text


def reading(d: Interval) -> str:
    if math.isnan(d.low):
        return 'one draw: no interval'
    return ('higher' if d.low > 0 else 'lower') if d.excludes_zero else 'no difference found'


def final_loss(rows: Sequence[dict]) -> dict[int, float]:
    """Per draw the last logged training loss (MMEngine's mean over the logging interval)."""
    return {r['draw']: r['loss'][-1] for r in rows}


def comparison_rows(rows: Sequence[dict], dataset: str, phase: str,
                    of=per_draw) -> list[tuple[str, str, Interval]]:
    """``(a, b, a - b)`` for each pair of :data:`COMPARED` that both have runs of ``phase``, of the mIoU (or
    of what ``of`` takes from the rows: :func:`final_loss`)."""
    out = []
    for a, b in COMPARED:
        ra, rb = (of(select(rows, dataset=dataset, phase=phase, backbone=x, variant='')) for x in (a, b))
        if set(ra) & set(rb):
            out.append((a, b, paired_difference(ra, rb)))
    return out


def phase_section(rows: Sequence[dict], dataset: str, phase: str) -> list[str]:
    """One dataset and phase: each backbone's mIoU, then the paired differences."""
    at = select(rows, dataset=dataset, phase=phase, variant='')
    if not at:
        return []
    iters = sorted({r['iters'] for r in at})
    out = [f'### {DATASET_TITLES[dataset]}: {PHASE_TITLES[phase]} ({"/".join(map(str, iters))} iterations)', '',
           '| backbone | lr | mIoU, mean [95 %] | draws | final loss | s per run |', '|---|---|---|---|---|---|']
    for backbone in BACKBONES:
        rs = select(at, backbone=backbone)
        if rs:
            final = mean_interval([r['loss'][-1] for r in rs])
            out.append(f"| {LABELS[backbone]} | {rs[0]['lr']:g} | {mean_interval([r['mIoU'] for r in rs]).format(2)} "
                       f"| {len(rs)} | {final.format(3)} | {np.mean([r['seconds'] for r in rs]):.0f} |")
    out += ['', '| paired difference | mIoU points, mean [95 %] | reading | final training loss | reading | draws |',
            '|---|---|---|---|---|---|']
    for (a, b, d), (*_, loss) in zip(comparison_rows(rows, dataset, phase),
                                     comparison_rows(rows, dataset, phase, final_loss)):
        out.append(f'| {LABELS[a]} - {LABELS[b]} | {cell(d)} | {reading(d)} | {cell(loss, digits=3)} '
                   f'| {reading(loss)} | {d.n} |')
    return out + ['']


def ablation_section(rows: Sequence[dict], dataset: str) -> list[str]:
    """LiSA-PVT-T's variants on the test draws: mIoU, paired against LiSA-PVT-T and PVT-T."""
    variants = [v for v in ABLATIONS if select(rows, dataset=dataset, phase='ablate', variant=v)]
    if not variants:
        return []
    lisa = per_draw(select(rows, dataset=dataset, phase='test', backbone='lisa-pvt-t', variant=''))
    pvt = per_draw(select(rows, dataset=dataset, phase='test', backbone='pvt-t', variant=''))
    out = [f'### {DATASET_TITLES[dataset]}: LiSA-PVT-T with one part changed (from scratch)', '',
           'Each variant at LiSA-PVT-T\'s chosen lr on the same test draws; a difference to LiSA-PVT-T that excludes 0 '
           'is a part that moves the result, and the last column is the gap to PVT-T that remains.', '',
           '| variant | change | mIoU, mean [95 %] | - LiSA-PVT-T | - PVT-T | final loss - LiSA-PVT-T\'s | draws |',
           '|---|---|---|---|---|---|---|']
    lisa_loss = final_loss(select(rows, dataset=dataset, phase='test', backbone='lisa-pvt-t', variant=''))
    for v in variants:
        runs = select(rows, dataset=dataset, phase='ablate', variant=v)
        own, loss = per_draw(runs), final_loss(runs)
        against = [cell(paired_difference(own, ref)) if set(own) & set(ref) else 'n/a' for ref in (lisa, pvt)]
        against.append(cell(paired_difference(loss, lisa_loss), digits=3) if set(loss) & set(lisa_loss) else 'n/a')
        out.append(f'| {v} | {ABLATIONS[v][1]} | {mean_interval(list(own.values())).format(2)} | {against[0]} '
                   f'| {against[1]} | {against[2]} | {len(own)} |')
    return out + ['']


def lr_section(rows: Sequence[dict]) -> list[str]:
    """The development runs: mean mIoU per candidate lr, the chosen one in bold."""
    dev = select(rows, phase='select')
    if not dev:
        return []
    chosen = chosen_lrs(rows)
    lrs = sorted({r['lr'] for r in dev})
    out = ['### Learning rates (development draws)', '',
           '| dataset | backbone | ' + ' | '.join(f'lr {lr:g}' for lr in lrs) + ' |', '|---|---|' + '---|' * len(lrs)]
    for dataset in DATASET_TITLES:
        for backbone in BACKBONES:
            cells = []
            for lr in lrs:
                rs = select(dev, dataset=dataset, backbone=backbone, lr=lr)
                text = f"{np.mean([r['mIoU'] for r in rs]):.2f} ({len(rs)})" if rs else '-'
                cells.append(f'**{text}**' if rs and chosen.get((dataset, backbone)) == lr else text)
            if any(c != '-' for c in cells):
                out.append(f'| {DATASET_TITLES[dataset]} | {LABELS[backbone]} | ' + ' | '.join(cells) + ' |')
    return out + ['', 'Mean mIoU over the development draws (their count in brackets); bold: chosen.', '']


def findings(rows: Sequence[dict]) -> list[str]:
    """One line per dataset and phase: the paired differences; then the ablations that moved LiSA."""
    out = []
    for dataset in DATASET_TITLES:
        for phase in ('test', 'longer', 'softmax-start'):
            found = comparison_rows(rows, dataset, phase)
            if found:
                parts = [f'{LABELS[a]} - {LABELS[b]} {cell(d)} mIoU ({reading(d)}), final training loss '
                         f'{cell(loss, digits=3)} ({reading(loss)})'
                         for (a, b, d), (*_, loss) in zip(found, comparison_rows(rows, dataset, phase, final_loss))]
                n = max(d.n for *_, d in found)
                out.append(f'- {DATASET_TITLES[dataset]}, {PHASE_TITLES[phase]}, {n} paired draws: ' + '; '.join(parts)
                           + '.')
        lisa = per_draw(select(rows, dataset=dataset, phase='test', backbone='lisa-pvt-t', variant=''))
        moved, still = [], []
        for v in ABLATIONS:
            own = per_draw(select(rows, dataset=dataset, phase='ablate', variant=v))
            if set(own) & set(lisa):
                d = paired_difference(own, lisa)
                (moved if d.excludes_zero else still).append(f'{v} {cell(d)}')
        if moved or still:
            out.append(f'- {DATASET_TITLES[dataset]}, ablations against LiSA-PVT-T: '
                       + (f"moved it: {', '.join(moved)}" if moved else 'none moved it')
                       + (f"; no difference found: {', '.join(still)}" if still else '') + '.')
    return out or ['- No test runs yet.']


def weight_decay_bound(rows: Sequence[dict]) -> str:
    """Why weight decay on LiSA's scalars is not an ablation here: AdamW multiplies a decayed weight by
    ``1 - lr wd`` per step, so over ``t`` steps it shrinks by at most ``1 - (1 - lr wd)^t`` of itself (the
    poly schedule only lowers lr)."""
    cfg = Config.fromfile(ROOT / CONFIGS['nuclei'])
    wd = cfg.optim_wrapper.optimizer.weight_decay
    lr = max(r['lr'] for r in rows)
    steps = max(r['iters'] for r in rows)
    shrink = 1 - (1 - lr * wd) ** steps
    return (f'Weight decay on alpha, beta and the step MLP is not run as an ablation: beta is a constant (0.5, no '
            f"parameter), and AdamW shrinks a decayed weight by the factor 1 - lr x wd per step, so over the longest "
            f'run here ({steps} steps at lr <= {lr:g}, wd {wd:g}) decay removes at most {shrink:.1e} of a weight '
            '(1 - (1 - lr wd)^steps): decaying alpha and the step MLP\'s biases or not cannot move an mIoU here. '
            "The configs exempt them (and norms, position tables) as `configs/_base_/no_weight_decay.py` states.")


def protocol(rows: Sequence[dict]) -> list[str]:
    cfg = Config.fromfile(ROOT / CONFIGS['generated'])
    dev = select(rows, phase='select')
    test_draws = sorted({r['draw'] for r in rows if r['phase'] != 'select'})
    seconds = sum(r['seconds'] for r in rows)
    lrs = sorted({r['lr'] for r in dev})
    items = [
        'Models: Semantic FPN (neck 256, head 128 channels) with PVT-T (softmax, spatial reduction 8/4/2/1), '
        'FLatten-PVT-T and LiSA-PVT-T (T = 3, adaptive step weights, 3x3 local branch, alpha 0.5 at init), the '
        'same code and recipe, from scratch (random init) unless stated: `configs/segmentation/dynamics/`, the '
        f"demo's recipe (AdamW, weight decay {cfg.optim_wrapper.optimizer.weight_decay:g}, poly decay to 0, batch "
        f'{cfg.train_dataloader.batch_size}, {cfg.crop_size[0]}-px crops, {cfg.train_cfg.max_iters} iterations, one '
        'CPU thread per run).',
        f'Data: (a) cell nuclei, real: `stardist/data/images/img2d.tif` and `mask2d.tif` of the `{STARDIST}` wheel '
        '(PyPI, BSD-3-Clause; a fluorescence image of the 2018 Data Science Bowl), 512 x 512 px, 125 labelled nuclei '
        f'(20 % of the pixels), 2 classes (background, nucleus), cut into 16 tiles of {TILE} px; draw r validates '
        f'on {HELD_OUT} tiles chosen by seed r and trains on the other {16 - HELD_OUT}. (b) generated ADE20K: the '
        "demo's synthetic ADE20K (96 train, 24 validation images, 96 px high), drawn with seed r.",
        'Learning rate: per dataset and backbone the candidate (' + ', '.join(f'{lr:g}' for lr in lrs) + ') with the '
        f'best mean mIoU over the development draws ({DEV_DRAW}, ...), the smallest of equals; the other phases '
        'use it.',
        'Test draws, paired: run r trains with seed r on draw r, the same draw for every model, and is scored (mIoU '
        'on the draw\'s validation images) on draws ' + (f'{test_draws[0]}-{test_draws[-1]}' if test_draws else
                                                         '(none yet)') + ', which no choice saw.',
        'Statistics: mean and 95 % interval over the draws (Student t); differences paired by draw with their 95 % '
        'interval, bold where it excludes 0; not corrected for multiplicity.',
        weight_decay_bound(rows) if rows else '',
        f'Cost: {seconds / 3600:.1f} core-hours summed over {len(rows)} runs '
        f"({', '.join(f'{p} {len(select(rows, phase=p))}' for p in PHASES if select(rows, phase=p))}); two runs "
        'at a time (the default) take about half that on 2 cores.',
    ]
    return [line for i, item in enumerate(filter(None, items), 1) for line in (f'{i}. {item}', '')]


def curve_band(rows: Sequence[dict], minus: Sequence[dict] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, mean training loss over ``rows`` and its 95 % half-width, at the steps every run logged; with
    ``minus``, of the loss minus that of ``minus``'s run on the same draw (paired; the draws both hold)."""
    other = {r['draw']: dict(zip(r['loss_step'], r['loss'])) for r in minus}
    if minus:
        rows = [r for r in rows if r['draw'] in other]
    logged = [dict(zip(r['loss_step'], r['loss'])) for r in rows]
    steps = sorted(set.intersection(*(set(x) for x in logged + [other[r['draw']] for r in rows if minus])))
    losses = np.array([[x[s] - (other[r['draw']][s] if minus else 0.0) for s in steps] for r, x in zip(rows, logged)])
    intervals = [mean_interval(list(column)) for column in losses.T]
    return (np.array(steps), np.array([i.mean for i in intervals]),
            np.array([i.high - i.mean if i.n > 1 else 0.0 for i in intervals]))


def _band(ax, rows: Sequence[dict], name: str, style: str = '-', minus: Sequence[dict] = (),
          color: str | None = None) -> None:
    if rows and (not minus or {r['draw'] for r in rows} & {r['draw'] for r in minus}):
        steps, mean, half = curve_band(rows, minus)
        line, = ax.plot(steps, mean, style, lw=1.2, color=color, label=f'{name} ({len(rows)})')
        ax.fill_between(steps, mean - half, mean + half, color=line.get_color(), alpha=0.15)


def plot(rows: Sequence[dict], path: Path) -> None:
    """Loss curves, mean and 95 % band over the draws, per dataset and phase: each backbone's training loss;
    from scratch also each backbone's loss minus PVT-T's and each ablation's minus LiSA-PVT-T's, paired by draw."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    panels = []
    for dataset in DATASET_TITLES:
        for phase in PHASE_TITLES:
            if select(rows, dataset=dataset, phase=phase):
                panels.append((dataset, phase, 'loss'))
                if phase == 'test':
                    panels.append((dataset, phase, 'minus PVT-T'))
                    if select(rows, dataset=dataset, phase='ablate'):
                        panels.append((dataset, 'ablate', 'minus LiSA-PVT-T'))
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.6 * max(len(panels), 1), 4), squeeze=False)
    for ax, (dataset, phase, kind) in zip(axes[0], panels):
        of = {b: select(rows, dataset=dataset, phase='test' if phase == 'ablate' else phase, backbone=b, variant='')
              for b in BACKBONES}
        if kind == 'loss':
            for b in BACKBONES:
                _band(ax, of[b], LABELS[b], color=COLORS[b])
            ax.set_yscale('log')
        elif kind == 'minus PVT-T':
            for b in ('flatten-pvt-t', 'lisa-pvt-t'):
                _band(ax, of[b], LABELS[b], minus=of['pvt-t'], color=COLORS[b])
        else:
            for v in ABLATIONS:
                _band(ax, select(rows, dataset=dataset, phase='ablate', variant=v), v, '--', minus=of['lisa-pvt-t'])
        if kind != 'loss':
            ax.axhline(0, color='grey', lw=0.8)
        ax.set(title=f"{DATASET_TITLES[dataset]}: {PHASE_TITLES.get(phase, 'ablations')}", xlabel='iteration',
               ylabel='training loss' + ('' if kind == 'loss' else f', {kind} (paired)'))
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_document(rows: Sequence[dict], path: Path, command: str, note: str = '') -> None:
    """``path`` and its plot (``path`` with ``.png``) from ``rows``; ``note`` (markdown) is the reading,
    placed after the findings."""
    png = path.with_suffix('.png')
    out = ['# Training dynamics: LiSA-PVT-T against PVT-T and FLatten-PVT-T, from scratch', '',
           f'Written by `{command}` from its rows; the protocol\'s code is `projects/lisa/dynamics/`. Does LiSA train '
           'as well as the attention it replaces, on real images, early in training?', '',
           '## Findings', '', *findings(rows), '']
    if note.strip():
        out += ['## Reading', '', note.strip(), '']
    out += ['## Protocol', '', *protocol(rows), '## Results', '', *lr_section(rows)]
    for dataset in DATASET_TITLES:
        for phase in PHASE_TITLES:
            out += phase_section(rows, dataset, phase)
            if phase == 'test':
                out += ablation_section(rows, dataset)
    out += [f'![training loss, mean and 95 % band over the draws]({png.name})', '']
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('\n'.join(out))
    plot(rows, png)
    print(f'wrote {path} and {png}')
