"""The runs' own metric files beside the rows of the paper's tables (:data:`.paper.ROWS`).

``tools/collect_results.py`` prints the tables this project can reproduce
(Tables 1-8, Fig. 3, supp. Table 13): per row and metric the paper's value,
ours and the difference; the rows that have a run (:func:`rows_with_figures`),
or every row, ``missing`` where no run of the row was found.

**Which run is which row.** A run is an MMEngine work dir: the folder where
``tools/train.py`` / ``mim train`` (or ``test``) dumped its config file
``<config name>.py`` next to the timestamped run folders ``YYYYMMDD_HHMMSS/``.
The config name follows OpenMMLab's ``<fields>_<schedule>_<data>``:
:func:`parse_config_name` drops the schedule field (``8xb128``, ``8xb4-40k``,
``1x``, ``1xb4-12e`` ...) and splits off the last field, the data
(``in1k``, ``in1k-384px``, ``ade20k-512x512``, ``coco``, ``mini-imagenet``...),
leaving the *model key* (``deit-tiny_lisa``, ``fpn_lisa-pvt-t``,
``mask-rcnn_lisa-pvt-t_fpn``, ``deit-tiny_lisa-t5-global`` ...). A row lists
the model keys of its configs and a pattern for their data (:class:`Row`);
e.g. ``configs/classification/pvt-tiny_lisa_8xb128_in1k.py`` is Table 1, PVT-T,
LiSA. Runs on the generated data of ``make demo`` (data field
``synthetic-<imagenet|ade20k|coco>-<size>``) fill the row of the dataset they
stand in for, marked as such and never differenced against the paper.

**Which metric.** Per work dir the latest test result (``mim test``:
``<run>/<run>.json``) wins over the latest validation during training (the
last metric line of ``<run>/vis_data/scalars.json``); a work dir nested in
another of the same config (``work_dirs/X/test``) is the test of that run.
Several work dirs of one row (seeds) give the mean and the sample standard
deviation (``ddof=1``), as Fig. 3 reports its three runs.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .paper import ROWS, TABLE_13, TABLES, Gain, Row
from .scalars import SCALARS, last_entry
from .statistics import mean_std

# Our metric names -> (the key MMEngine logs, the factor to percent).
METRICS: dict[str, tuple[str, float]] = {
    'top-1': ('accuracy/top1', 1.0),
    'mIoU': ('mIoU', 1.0),
    'mAcc': ('mAcc', 1.0),
    'box AP': ('coco/bbox_mAP', 100.0),
    'box AP50': ('coco/bbox_mAP_50', 100.0),
    'box AP75': ('coco/bbox_mAP_75', 100.0),
    'mask AP': ('coco/segm_mAP', 100.0),
    'mask AP50': ('coco/segm_mAP_50', 100.0),
    'mask AP75': ('coco/segm_mAP_75', 100.0),
}

# The dataset a generated one of tools/generate_data.py stands in for (data field of its row).
SYNTHETIC_STANDS_FOR = {'imagenet': 'in1k', 'ade20k': 'ade20k-512x512', 'coco': 'coco'}
_SCHEDULE = re.compile(r'([a-z]+-)*\d+x(b\d+)?(-[\w.]+)*')  # 8xb128, 8xb4-40k, 1x, ms-crop-1x, 1xb4-12e
_RUN_DIR = re.compile(r'\d{8}_\d{6}')  # MMEngine's timestamp folders




def parse_config_name(name: str) -> tuple[str, str]:
    """``(model key, data)`` of an OpenMMLab config name (file name with or without ``.py``).

    >>> parse_config_name('fpn_lisa-pvt-t_8xb4-40k_ade20k-512x512.py')
    ('fpn_lisa-pvt-t', 'ade20k-512x512')
    >>> parse_config_name('mask-rcnn_lisa-pvt-t_fpn_1x_coco')
    ('mask-rcnn_lisa-pvt-t_fpn', 'coco')
    """
    fields = Path(name).name.removesuffix('.py').split('_')
    if len(fields) < 2:  # not an OpenMMLab name: no row has it
        return fields[0], ''
    return '_'.join(f for f in fields[:-1] if not _SCHEDULE.fullmatch(f)), fields[-1]


def synthetic_stand_in(data: str) -> str | None:
    """The data field of the dataset a generated one stands in for (``synthetic-coco-96`` -> ``coco``)."""
    match = re.fullmatch(r'synthetic-([a-z0-9]+)(-.*)?', data)
    return SYNTHETIC_STANDS_FOR.get(match.group(1)) if match else None


@dataclass(frozen=True)
class Run:
    """The result of one work dir: its config, metrics (percent, :data:`METRICS` names) and their file."""

    config: str
    work_dir: Path
    metrics: dict[str, float]
    source: Path
    kind: str  # 'test' or 'val'

    @property
    def synthetic(self) -> bool:
        return synthetic_stand_in(parse_config_name(self.config)[1]) is not None


def _percent(raw: dict) -> dict[str, float]:
    return {name: factor * float(raw[key]) for name, (key, factor) in METRICS.items()
            if isinstance(raw.get(key), (int, float))}


def _test_metrics(run_dir: Path) -> dict[str, float]:
    path = run_dir / f'{run_dir.name}.json'  # written by LoggerHook after a test epoch only
    return _percent(json.loads(path.read_text())) if path.is_file() else {}


def _val_metrics(run_dir: Path) -> dict[str, float]:
    path = run_dir / SCALARS
    return _percent(last_entry(path, (key for key, _ in METRICS.values()))) if path.is_file() else {}


def _config_of(work_dir: Path, run_dir: Path) -> str | None:
    """The name of the config a run folder was made with: the one dumped config, or the one equal to its own."""
    dumped = sorted(work_dir.glob('*.py'))
    if len(dumped) == 1:
        return dumped[0].stem
    own = run_dir / 'vis_data' / 'config.py'
    if own.is_file():
        text = own.read_text()
        for path in dumped:
            if path.read_text() == text:
                return path.stem
    return None


def read_work_dir(work_dir: Path) -> Run | None:
    """The work dir's latest test result, else its latest validation, or None if it has neither."""
    runs = sorted(p for p in work_dir.iterdir() if p.is_dir() and _RUN_DIR.fullmatch(p.name))
    for kind, read in (('test', _test_metrics), ('val', _val_metrics)):
        for run_dir in reversed(runs):
            metrics = read(run_dir)
            config = _config_of(work_dir, run_dir) if metrics else None
            if config:
                source = run_dir / (f'{run_dir.name}.json' if kind == 'test' else SCALARS)
                return Run(config, work_dir, metrics, source, kind)
    return None


def find_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every run under ``paths``; a work dir inside another of the same config replaces it (its test)."""
    found: dict[Path, Run] = {}
    for root in map(Path, paths):
        if not root.is_dir():
            raise FileNotFoundError(f'work dir {root} does not exist')
        for work_dir in sorted({p.parent for p in root.rglob('*') if p.is_dir() and _RUN_DIR.fullmatch(p.name)},
                               key=lambda p: len(p.parts)):
            run = read_work_dir(work_dir)
            if run is None:
                continue
            outer = next((p for p in work_dir.parents if p in found and found[p].config == run.config), None)
            found[outer or work_dir] = run if outer is None else replace(run, work_dir=outer)
    return list(found.values())


@dataclass
class Entry:
    """One line of the output: a row's metric, the paper's value and ours over the runs found."""

    table: str
    row: str
    metric: str
    paper: float | None
    paper_std: float | None = None
    ours: float | None = None
    ours_std: float | None = None
    runs: list[str] = field(default_factory=list)
    data: str = ''
    synthetic: bool = False
    gain: bool = False  # a difference of two rows (:class:`Gain`)

    @property
    def difference(self) -> float | None:
        if self.synthetic or self.paper is None or self.ours is None:
            return None
        return self.ours - self.paper


def matches(row: Row, run: Run) -> bool:
    """Whether ``run``'s config is one of ``row``'s (model key and data, a generated dataset standing in)."""
    key, data = parse_config_name(run.config)
    return key in row.keys and re.fullmatch(row.data, synthetic_stand_in(data) or data) is not None


def compare(runs: Sequence[Run], rows: Sequence[Row | Gain] = ROWS) -> list[Entry]:
    """Entries of every row and metric; real-data runs are preferred to generated-data ones."""
    entries: list[Entry] = []
    by_label: dict[tuple[str, str], dict[str, Entry]] = {}
    for row in rows:
        if isinstance(row, Gain):
            minuend, subtrahend = by_label[row.table, row.minuend], by_label[row.table, row.subtrahend]
            for metric, value in row.paper.items():
                a, b = minuend[metric], subtrahend[metric]
                entry = Entry(row.table, row.label, metric, value, data=a.data, synthetic=a.synthetic or b.synthetic,
                              gain=True)
                if a.ours is not None and b.ours is not None:
                    entry.ours, entry.runs = a.ours - b.ours, a.runs + b.runs
                entries.append(entry)
            continue
        found = [run for run in runs if matches(row, run)]
        real = [run for run in found if not run.synthetic]
        chosen = real or found
        for metric, value in row.paper.items():
            entry = Entry(row.table, row.label, metric, value, row.paper_std.get(metric))
            values = [run.metrics[metric] for run in chosen if metric in run.metrics]
            if values:
                entry.ours, std = mean_std(values)
                entry.ours_std = None if math.isnan(std) else std
                entry.runs = [str(run.work_dir) for run in chosen if metric in run.metrics]
                entry.data = ', '.join(sorted({parse_config_name(run.config)[1] for run in chosen}))
                entry.synthetic = not real
            entries.append(entry)
            by_label.setdefault((row.table, row.label), {})[metric] = entry
    return entries


def _memory_mib(row: dict) -> float | None:
    """Peak memory on CUDA, else the bytes saved for backward (the CPU has no allocator peak), in MiB."""
    value = row.get('peak', row.get('saved'))
    return None if value is None else value / 2 ** 20


def table_13(rows: Sequence[dict]) -> list[Entry]:
    """Supp. Table 13 beside the rows of ``tools/benchmark_model.py``'s JSON, and LiSA / FLatten ratios."""
    ours = {(r['tokens'], r['attention']): r for r in rows}
    measures = (('latency ms', 0, lambda r: r.get('train_ms')), ('memory MB', 1, _memory_mib))
    entries = []
    for tokens, paper in TABLE_13.items():
        for attention in paper:
            row = ours.get((tokens, attention), {})
            for metric, index, read in measures:
                if paper[attention][index] is not None:
                    entries.append(Entry('Table 13', f'{tokens:,} tokens / {attention}', metric,
                                         paper[attention][index], ours=read(row),
                                         runs=['benchmark_model.json'] if row else []))
        lisa, flatten = ours.get((tokens, 'lisa'), {}), ours.get((tokens, 'flatten'), {})
        for metric, index, read in measures:
            if paper['lisa'][index] is not None:
                measured = read(lisa) / read(flatten) if read(lisa) and read(flatten) else None
                entries.append(Entry('Table 13', f'{tokens:,} tokens / LiSA over FLatten', metric.split()[0] + ' ratio',
                                     paper['lisa'][index] / paper['flatten'][index], ours=measured,
                                     runs=['benchmark_model.json'] if measured else []))
    return entries


def find_benchmarks(paths: Iterable[str | Path]) -> list[dict]:
    """The rows of every ``benchmark_model.json`` under ``paths``."""
    return [row for root in map(Path, paths) for path in sorted(Path(root).rglob('benchmark_model.json'))
            for row in json.loads(path.read_text())['rows']]


def _number(value: float | None, std: float | None = None, signed: bool = False) -> str:
    if value is None:
        return '-'
    text = f'{value:+.2f}' if signed else f'{value:.2f}'
    return f'{text} +- {std:.2f}' if std is not None else text


def rows_with_figures(entries: Sequence[Entry]) -> list[Entry]:
    """The entries of the rows (of a table) for which at least one metric has a figure of ours."""
    found = {(e.table, e.row) for e in entries if e.ours is not None}
    return [e for e in entries if (e.table, e.row) in found]


def _cells(e: Entry) -> tuple[str, str, str]:
    """Paper, ours ('missing' without a run) and ours - paper ('-' where there is none) of one entry."""
    ours = 'missing' if e.ours is None else _number(e.ours, e.ours_std, signed=e.gain)
    return _number(e.paper, e.paper_std, signed=e.gain), ours, _number(e.difference, signed=True)


def _joined(paper: str, ours: str, difference: str) -> str:
    """``ours / paper (difference)``, leaving out what is not there; ``missing (paper X)`` without ours."""
    if ours == 'missing':
        return ours if paper == '-' else f'missing (paper {paper})'
    text = ours if paper == '-' else f'{ours} / {paper}'
    return text if difference == '-' else f'{text} ({difference})'


def to_markdown(entries: Sequence[Entry]) -> str:
    """One Markdown table per paper table, one line per row.

    A table of one metric has the columns paper, ours, ours - paper; with several
    metrics each gets one column of ``ours / paper (ours - paper)``. Runs on generated
    data carry their data field in the row and no difference.
    """
    out = []
    for table in dict.fromkeys(e.table for e in entries):
        rows: dict[str, dict[str, Entry]] = {}
        for e in entries:
            if e.table == table:
                rows.setdefault(e.row, {})[e.metric] = e
        metrics = list(dict.fromkeys(m for row in rows.values() for m in row))
        single = len(metrics) == 1
        header = ['paper', 'ours', 'ours - paper'] if single else metrics
        out += [f'### {table}: {TABLES[table]}', '']
        out += [] if single else ['Each cell: ours / paper (ours - paper).', '']
        out += [f'| row | {" | ".join(header)} | runs |', '|---' * (len(header) + 2) + '|']
        for label, row in rows.items():
            data = {e.data for e in row.values() if e.synthetic}
            label += f' ({", ".join(sorted(data))}: not the paper\'s data)' if data else ''
            cells = (list(_cells(row[metrics[0]])) if single else
                     [_joined(*_cells(row[m])) if m in row else '' for m in metrics])
            runs = max(len(e.runs) for e in row.values())
            out.append(f'| {label} | {" | ".join(cells)} | {runs} |')
        out.append('')
    return '\n'.join(out)


def to_json(entries: Sequence[Entry]) -> str:
    return json.dumps([{**vars(e), 'difference': e.difference} for e in entries], indent=1)
