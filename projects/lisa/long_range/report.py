"""The long-range probe's report: accuracy per run, paired comparisons, controls, markdown, plot.

A *row* is one (hop count, distance bin) cell of one training run, as ``tools/long_range.py``
stores it::

    dict(task, phase, attention, layers, lr, run, iters, hops, lo, hi, correct, total,
         seconds, s_per_iter, params)

``phase`` is ``'select'`` (learning-rate choice, on development draws) or ``'test'`` (the reported
runs, on draws that no choice looked at). Run ``r`` trains with seed ``r`` on data drawn with the
generator's seed ``r``, the same for every attention, so comparisons are paired by run
(:func:`~projects.lisa.analysis.statistics.paired_difference`). A run's accuracy is its pixel
accuracy (images for classification) over the cells a filter keeps.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..analysis.statistics import Interval, mean_interval, paired_difference, solved_share

SOLVED = 95.0
"""A run *solves* a task at this accuracy (%): runs are bimodal, so the share that solve it is
reported beside the mean."""
FAR_MIN = 48
"""px: the lookup's far bin (12 tokens), beyond every local receptive field of one layer."""
MARKED_MIN = 16
"""px along Pathfinder's marked curve: its far half (the curve is 32 px long), two dash gaps or more away."""
LOCAL = ('window', 'lisa-local')
LABELS = {'softmax': 'softmax', 'window': 'window 7x7 (Swin)', 'flatten': 'FLatten', 'linear': 'linear',
          'lisa-local': 'LiSA local-only', 'lisa': 'LiSA T=3', 'lisa-global': 'LiSA global-only T=3',
          'lisa-t1': 'LiSA T=1 (self-loop only)', 'lisa-t2': 'LiSA T=2 (one step of S)', 'lisa-t5': 'LiSA T=5',
          'lisa-tinf': 'LiSA T=inf'}
ORDER = tuple(LABELS)
PAIRS = (
    (('lisa', 1), ('softmax', 1)), (('lisa', 1), ('flatten', 1)), (('lisa', 1), ('lisa-t2', 1)),
    (('lisa', 1), ('lisa-global', 1)), (('lisa-t2', 1), ('softmax', 1)), (('lisa-t2', 1), ('flatten', 1)),
    (('lisa', 1), ('softmax', 2)), (('lisa', 1), ('flatten', 2)), (('softmax', 2), ('softmax', 1)),
    (('flatten', 2), ('flatten', 1)), (('lisa', 2), ('lisa', 1)),
    (('lisa-tinf', 1), ('lisa', 1)), (('lisa-tinf', 1), ('softmax', 1)), (('lisa-tinf', 1), ('flatten', 1)))
"""The comparisons the document makes where both sides ran: LiSA T=3 against one-hop attention,
against its controls (T=2: one step of S, the walk's control; global-only: no local branch), and one
layer against two ("long-range in one layer": fewer layers for the same reach); LiSA T=inf (where it ran:
Pathfinder) against T=3 and one-hop attention."""

Keep = Callable[[dict], bool]


@dataclass(frozen=True, order=True)
class Variant:
    """What a reported row is a run of: the attention, the model's depth, the training budget and the lr."""

    attention: str
    layers: int
    iters: int
    lr: float

    @classmethod
    def of(cls, row: dict) -> Variant:
        return cls(row['attention'], row['layers'], row['iters'], row['lr'])

    def label(self) -> str:
        return LABELS.get(self.attention, self.attention) + (f', {self.layers} layers' if self.layers > 1 else '')

    def sort_key(self) -> tuple:
        return (self.iters, self.layers, ORDER.index(self.attention) if self.attention in ORDER else len(ORDER),
                self.attention, self.lr)


def everything(row: dict) -> bool:
    return True


def far(row: dict) -> bool:
    return row['lo'] >= FAR_MIN


def marked_far(row: dict) -> bool:
    """Pathfinder segmentation: a pixel of the marked curve (label 1) at least :data:`MARKED_MIN` px along it.
    A distractor pixel's distance is Euclidean to the marker, so far from the marker lie distractors only."""
    return row.get('label') == 1 and row['lo'] >= MARKED_MIN


REPLICATION_FIRST = 1008
"""The first test draw of the replication: ``--runs 16`` trains draws 1008-1015 after the results on
draws 1000-1007 were read, so the comparisons on them alone check a finding on draws that no choice
(of lr, budget or comparison) looked at."""


def replicated(row: dict) -> bool:
    return row['run'] >= REPLICATION_FIRST


FAR = (f'far bin (>= {FAR_MIN} px)', far)
MARKED_FAR = (f'marked curve >= {MARKED_MIN} px along it', marked_far)
"""A task's far column: its title and the rows it keeps."""


def per_run(rows: Iterable[dict], keep: Keep = everything) -> dict[int, float]:
    """``{run: accuracy %}`` over the rows that ``keep`` accepts."""
    counts: dict[int, list[int]] = {}
    for r in rows:
        if keep(r):
            c = counts.setdefault(r['run'], [0, 0])
            c[0] += r['correct']
            c[1] += r['total']
    return {run: 100.0 * c / n for run, (c, n) in sorted(counts.items()) if n}


def variants(rows: Iterable[dict]) -> dict[Variant, list[dict]]:
    out: dict[Variant, list[dict]] = {}
    for r in rows:
        out.setdefault(Variant.of(r), []).append(r)
    return dict(sorted(out.items(), key=lambda item: item[0].sort_key()))


def nearest_bin(rows: Sequence[dict]) -> tuple[float, float]:
    """The smallest distance bin ``(lo, hi)`` among ``rows``."""
    return min((r['lo'], r['hi']) for r in rows)


def in_bin(bin_: tuple[float, float]) -> Keep:
    """A filter keeping the rows of the distance bin ``bin_``."""
    return lambda r: (r['lo'], r['hi']) == bin_


def chosen_lr(select_rows: Sequence[dict]) -> tuple[float, dict[float, Interval]]:
    """The learning rate whose development runs reach the highest mean accuracy (the smallest of
    equals), and every candidate's mean. A local-only attention (:data:`LOCAL`) is scored on the
    nearest distance bin: the only one its reach covers (elsewhere it is at chance whatever the lr,
    so a choice over all pixels would follow noise)."""
    by_lr: dict[float, list[dict]] = {}
    for r in select_rows:
        by_lr.setdefault(r['lr'], []).append(r)
    keep = in_bin(nearest_bin(select_rows)) if select_rows and select_rows[0]['attention'] in LOCAL else everything
    means = {lr: mean_interval(list(per_run(rows, keep).values())) for lr, rows in by_lr.items()}
    best = max(sorted(means), key=lambda lr: means[lr].mean)
    return best, means


def chosen_lrs(rows: Iterable[dict]) -> dict[tuple[str, str, int], float]:
    """``{(task, attention, layers): lr}`` that :func:`chosen_lr` takes from each group's development runs."""
    selection: dict[tuple, list[dict]] = {}
    for r in rows:
        if r['phase'] == 'select':
            selection.setdefault((r['task'], r['attention'], r['layers']), []).append(r)
    return {group: chosen_lr(rs)[0] for group, rs in selection.items()}


def reported(rows: Sequence[dict]) -> list[dict]:
    """The test rows, of the chosen lr wherever the development runs chose one (:func:`chosen_lrs`);
    a run at another lr is not a reported run."""
    chosen = chosen_lrs(rows)
    return [r for r in rows if r['phase'] == 'test'
            and chosen.get((r['task'], r['attention'], r['layers']), r['lr']) == r['lr']]


@dataclass(frozen=True)
class Comparison:
    first: Variant
    second: Variant
    difference: Interval
    several_budgets: bool = False
    """Whether the task ran more than one budget: then a comparison at one budget names it."""

    def budget(self) -> str:
        if self.first.iters != self.second.iters:
            return f' ({self.first.iters} vs {self.second.iters} it)'
        return f' ({self.first.iters} it)' if self.several_budgets else ''

    def title(self) -> str:
        return f'{self.first.label()} − {self.second.label()}{self.budget()}'

    def sentence(self) -> str:
        a, b, d = self.first.label(), self.second.label(), self.difference
        runs = f'{d.n} paired runs'
        if d.excludes_zero and a == b:  # one variant at two budgets: the budgets tell them apart
            first, second = (f'{a} at {v.iters} it' for v in (self.first, self.second))
            ahead, behind = (first, second) if d.mean > 0 else (second, first)
            return (f'{ahead} ahead of {behind}: {a} {self.first.iters} − {self.second.iters} it = '
                    f'{d.format(signed=True)} points ({runs})')
        if d.excludes_zero:
            ahead, behind = (a, b) if d.mean > 0 else (b, a)
            return f'{ahead} ahead of {behind}{self.budget()}: {a} − {b} = {d.format(signed=True)} points ({runs})'
        return f'no difference found between {a} and {b}{self.budget()}: {d.format(signed=True)} points ({runs})'


def comparisons(rows: Sequence[dict], keep: Keep = everything) -> list[Comparison]:
    """The :data:`PAIRS` present in ``rows`` (test phase) at each budget, then each variant's budgets
    against each other (does a longer budget change its accuracy?)."""
    groups = variants(reported(rows))
    accuracy = {v: per_run(rs, keep) for v, rs in groups.items()}
    out = []
    budgets = sorted({v.iters for v in groups})
    for iters in budgets:
        for (a, la), (b, lb) in PAIRS:
            for first in (v for v in groups if (v.attention, v.layers, v.iters) == (a, la, iters)):
                for second in (v for v in groups if (v.attention, v.layers, v.iters) == (b, lb, iters)):
                    if set(accuracy[first]) & set(accuracy[second]):
                        out.append(Comparison(first, second, paired_difference(accuracy[first], accuracy[second]),
                                              len(budgets) > 1))
    for v in groups:
        longer = [w for w in groups
                  if (w.attention, w.layers, w.lr) == (v.attention, v.layers, v.lr) and w.iters > v.iters]
        for w in longer:
            if set(accuracy[v]) & set(accuracy[w]):
                out.append(Comparison(w, v, paired_difference(accuracy[w], accuracy[v])))
    return out


def replication(rows: Sequence[dict]) -> list[Comparison]:
    """The :func:`comparisons` on the replication draws alone (:data:`REPLICATION_FIRST` on), where the
    test runs hold draws on both sides of it."""
    runs = {r['run'] for r in rows if r['phase'] == 'test'}
    if not any(run >= REPLICATION_FIRST for run in runs) or all(run >= REPLICATION_FIRST for run in runs):
        return []
    return comparisons(rows, replicated)


def window_ceiling(tokens: int, window: int, chance: float) -> float:
    """Nearest-bin accuracy (%) of a perfect one-layer window model on the lookup.

    The nearest bin holds the cue's 4 edge neighbours. A window model sees the cue from a neighbour
    only inside one window: the ``tokens``-wide grid is padded to windows of ``window`` tokens from the
    top left, so of the ``tokens - 1`` neighbour pairs along a row (or column) ``floor((tokens - 1) /
    window)`` straddle a border, where the model is at chance. With the cue placed uniformly the
    ceiling is ``share + (1 - share) * chance``, ``share = 1 - floor((tokens - 1) / window) / (tokens - 1)``:
    93.3 % for 16 tokens and 7x7 windows.
    """
    share = 1 - ((tokens - 1) // window) / (tokens - 1)
    return 100 * share + (1 - share) * chance


def controls(rows: Sequence[dict], chance: float, ceiling: float) -> list[str]:
    """The one-hop controls: softmax >= 90 % on the far bin; each local attention near chance there
    (<= chance + 10) and, on the nearest bin, within 5 points of softmax (LiSA local-only: its 3x3
    neighbourhood holds the cue's) or of its ceiling (window: :func:`window_ceiling`)."""
    test = [r for r in reported(rows) if r['hops'] == 1 and r['layers'] == 1]
    if not test:
        return []
    near_bin = nearest_bin(test)
    near = in_bin(near_bin)

    def mean(attention: str, keep: Keep) -> float:
        values = per_run([r for r in test if r['attention'] == attention], keep)
        return statistics.fmean(values.values()) if values else math.nan

    lines = []
    soft_far, soft_near = mean('softmax', far), mean('softmax', near)
    if not math.isnan(soft_far):
        lines.append(f"- (a) softmax, hop 1, distance >= {FAR_MIN} px: {soft_far:.1f} % "
                     f"({'passes' if soft_far >= 90 else 'FAILS'}: >= 90 % required)")
    for name in LOCAL:
        f, n = mean(name, far), mean(name, near)
        if math.isnan(f):
            continue
        target, of_what = (ceiling, 'its ceiling (window borders)') if name == 'window' else (soft_near, 'softmax')
        ok = f <= chance + 10 and abs(n - target) <= 5
        lines.append(f'- (b) {LABELS[name]}, hop 1: far {f:.1f} % (chance {chance:.0f} %), nearest bin '
                     f'{near_bin[0]:g}-{near_bin[1]:g} px {n:.1f} % vs {of_what} {target:.1f} % '
                     f"({'passes' if ok else 'FAILS'}: far <= {chance + 10:.0f} %, near within 5 points)")
    return lines


def _cell(d: Interval) -> str:
    """A paired difference, **bold** where its interval excludes 0."""
    cell = d.format(signed=True)
    return f'**{cell}**' if d.excludes_zero else cell


def _difference_table(found: Sequence[Comparison]) -> list[str]:
    out = ['| comparison | difference (points) | runs | reading |', '|---|---|---|---|']
    for c in found:
        out.append(f'| {c.title()} | {_cell(c.difference)} | {c.difference.n} | '
                   + ('differ' if c.difference.excludes_zero else 'no difference found') + ' |')
    return out


def _draws(rows: Sequence[dict], keep: Keep) -> str:
    """The range of the test draws that ``keep`` accepts: ``'1008-1015'``."""
    draws = sorted({r['run'] for r in rows if r['phase'] == 'test' and keep(r)})
    return f'{draws[0]}-{draws[-1]}'


def task_section(task: str, rows: Sequence[dict], chance: float, ceiling: float | None = None,
                 far_column: tuple[str, Keep] = FAR) -> list[str]:
    """One task's tables: accuracy per variant (mean, 95 % interval, solved share, its far pixels:
    ``far_column``), the learning-rate choice, the paired comparisons (then on the replication draws alone,
    where they ran), and the controls where the task has one-hop rows. Classification rows carry their
    test draw's larger class (``majority``): its share, what always naming it scores, stands beside chance."""
    test = reported(rows)
    groups = variants(test)
    far_title, far_keep = far_column
    has_far = any(far_keep(r) for r in test) and any(not far_keep(r) for r in test)
    shares = {r['run']: 100 * r['majority'] / r['total'] for r in test if 'majority' in r}  # classification
    larger = (f'; always naming the larger class of a test draw scores {min(shares.values()):.1f}-'
              f'{max(shares.values()):.1f} % ({statistics.fmean(shares.values()):.1f} % on average)' if shares else '')
    out = [f'## {task}', '', f'Chance {chance:.1f} %{larger}. Test runs: mean and 95 % interval over the runs '
           f'(Student t), runs reaching {SOLVED:.0f} %, parameters, learning rate, cost.', '',
           '| attention | params | lr | iterations | runs | accuracy % | solved | '
           + (f'{far_title} % | ' if has_far else '') + 's per iteration |',
           '|---' * (8 + has_far) + '|']
    for v, rs in groups.items():
        acc = per_run(rs)
        done, n = solved_share(list(acc.values()), SOLVED)
        far_cell = f'{mean_interval(list(per_run(rs, far_keep).values())).format()} | ' if has_far else ''
        lrs = sorted({r['lr'] for r in rs})
        one = {r['run']: r for r in rs}.values()
        out.append(f"| {v.label()} | {rs[0]['params'] / 1e3:.1f} k | {'/'.join(f'{lr:g}' for lr in lrs)} | "
                   f'{v.iters} | {n} | {mean_interval(list(acc.values())).format()} | {done}/{n} | {far_cell}'
                   f"{statistics.fmean(r['s_per_iter'] for r in one):.3f} |")
    selection = [r for r in rows if r['phase'] == 'select']
    if selection:
        out += ['', 'Learning rate, chosen on development draws (their held-out images; runs '
                f"{', '.join(map(str, sorted({r['run'] for r in selection})))}), mean accuracy % per candidate"
                + (' (local-only attentions: on the nearest bin, the only one they reach)'
                   if any(r['attention'] in LOCAL for r in selection) else '') + ':', '',
                '| attention | candidates | chosen |', '|---|---|---|']
        groups: dict[Variant, list[dict]] = {}
        for v, rs in variants(selection).items():  # one row per attention and depth, over its lrs
            groups.setdefault(Variant(v.attention, v.layers, v.iters, 0.0), []).extend(rs)
        for v, rs in groups.items():
            best, means = chosen_lr(rs)
            out.append(f"| {v.label()} | {', '.join(f'{lr:g}: {m.mean:.1f}' for lr, m in sorted(means.items()))} | "
                       f'{best:g} |')
    found = comparisons(test)
    if found:
        out += ['', 'Paired differences of the accuracy column (test runs), 95 % interval; **bold**: the interval '
                'excludes 0.', '', *_difference_table(found)]
    again = replication(test)
    if again:
        out += ['', f'The same differences on draws {_draws(test, replicated)} alone: the replication, trained after '
                f'the results on draws {_draws(test, lambda r: not replicated(r))} were read.', '',
                *_difference_table(again)]
    lines = controls(rows, chance, ceiling) if ceiling is not None else []
    if lines:
        out += ['', '### Controls (one hop)', '', *lines]
    return out + ['']


def findings(tasks: dict[str, Sequence[dict]]) -> list[str]:
    """Every comparison whose paired interval excludes 0 as a sentence, then how many do not: what a sweep
    prints as it ends (the document tables the same comparisons: :func:`summary`, :func:`task_section`).
    Each task's comparisons over all its runs come first, then those on its replication draws alone
    (:data:`REPLICATION_FIRST`)."""
    differ, none = [], []
    for task, rows in tasks.items():
        for c in comparisons(rows):
            (differ if c.difference.excludes_zero else none).append(f'{task}: {c.sentence()}')
        again = replication(rows)
        draws = _draws(rows, replicated) if again else ''
        for c in again:
            (differ if c.difference.excludes_zero else none).append(f'{task}, draws {draws} alone: {c.sentence()}')
    return ([f'- {line}' for line in differ] or ['- No comparison separates two attentions.']) + (
        [f'- No difference found in {len(none)} other comparison(s): ' + '; '.join(none) + '.'] if none else [])


SUBJECT = ('lisa', 1)
"""The (attention, layers) that the summary compares with every other: one LiSA T=3 layer."""


def headline(found: Sequence[Comparison]) -> list[Comparison]:
    """Of the comparisons of :data:`SUBJECT` with one other variant at one budget, per other variant the one
    with the most paired runs; of equals the shortest budget (where the lr was chosen)."""
    best: dict[tuple[str, int], Comparison] = {}
    for c in found:  # by budget, the shortest first
        if (c.first.attention, c.first.layers) == SUBJECT and c.first.iters == c.second.iters:
            other = (c.second.attention, c.second.layers)
            if other not in best or c.difference.n > best[other].difference.n:
                best[other] = c
    return list(best.values())


def summary(tasks: dict[str, Sequence[dict]]) -> list[str]:
    """The document's findings in a few lines: per task the :func:`headline` comparisons whose interval
    excludes 0, each beside the same comparison on the replication draws alone where they ran, then what
    the task sections hold besides."""
    subject = LABELS[SUBJECT[0]]
    out = [f'| task | {subject} against | iterations | paired runs | {subject} − it (points) | '
           'replication draws alone |', '|---|---|---|---|---|---|']
    total = differ = shown = 0
    silent = []
    for task, rows in tasks.items():
        found = comparisons(rows)
        again = {(c.first, c.second): c.difference for c in replication(rows)}
        total += len(found) + len(again)
        differ += sum(c.difference.excludes_zero for c in found) + sum(d.excludes_zero for d in again.values())
        if found and not any(c.difference.excludes_zero for c in found):
            silent.append(task)
        for c in headline(found):
            if c.difference.excludes_zero:
                twin = again.get((c.first, c.second))
                shown += 1 + (twin is not None)
                out.append(f'| {task} | {c.second.label()} | {c.first.iters} | {c.difference.n} | '
                           f"{c.difference.format(signed=True)} | {_cell(twin) if twin else '–'} |")
    rule = (f'{subject} against each attention it is compared with, at the budget with the most paired runs (of '
            'equals the shortest)')
    rest = (f'Of all {total} comparisons {differ} exclude 0 and {total - differ} do not; the {total - shown} not '
            'shown here (other budgets, other pairs, the replication draws alone) are in the task sections'
            + (f"; no interval excludes 0 on {', '.join(silent)}" if silent else '') + '.')
    if not shown:
        return [f'{rule}: no 95 % interval excludes 0. {rest}']
    return out + ['', f"Above: {rule}, where the 95 % interval excludes 0 (**bold**: the replication's too). {rest}"]


def plot(tasks: dict[str, Sequence[dict]], path: Path) -> None:
    """One panel per task: each run's accuracy (dots) and the mean with its 95 % interval."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    names = [t for t, rows in tasks.items() if any(r['phase'] == 'test' for r in rows)]
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(4.6 * max(len(names), 1), 4.2), squeeze=False)
    for ax, task in zip(axes[0], names):
        groups = variants(reported(tasks[task]))
        for x, rs in enumerate(groups.values()):
            acc = list(per_run(rs).values())
            ci = mean_interval(acc)
            ax.scatter([x] * len(acc), acc, s=10, color='grey', alpha=0.6, zorder=2)
            err = [[ci.mean - ci.low], [ci.high - ci.mean]] if ci.n > 1 else None
            ax.errorbar([x], [ci.mean], yerr=err, fmt='o', color='C0', capsize=4, zorder=3)
        ax.set_xticks(range(len(groups)), [f'{v.label()}\n{v.iters} it' for v in groups], rotation=60,
                      ha='right', fontsize=7)
        ax.set(title=task, ylabel='accuracy (%)', ylim=(0, 101))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
