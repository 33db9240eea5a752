"""The paper's result tables as data, the runs' own metric files, and the two side by side.

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

from .paper import TABLE_13
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


@dataclass(frozen=True)
class Row:
    """One row of a paper table: the configs that reproduce it and the paper's values.

    Args:
        table: The paper's label, e.g. ``'Table 1'``.
        label: The row as the paper names it.
        keys: Model keys (:func:`parse_config_name`) of the configs of this row.
        data: Regular expression the config's data field must match in full.
        paper: Metric name (:data:`METRICS`) -> the paper's value (None: not reported).
        paper_std: Metric -> the paper's standard deviation, where it reports one.
    """

    table: str
    label: str
    keys: tuple[str, ...]
    data: str
    paper: dict[str, float | None]
    paper_std: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Gain:
    """A difference the paper reports between two rows of one table (``minuend - subtrahend``)."""

    table: str
    label: str
    minuend: str
    subtrahend: str
    paper: dict[str, float]


def _rows_1() -> list[Row]:
    values = {  # ImageNet-1K top-1 (%): softmax, FLatten, LiSA
        ('DeiT-T 224', 'deit-tiny', 'in1k'): (72.20, 74.10, 74.54),
        ('DeiT-T 384', 'deit-tiny', 'in1k-384px'): (74.90, 76.53, 77.54),
        ('DeiT-S 224', 'deit-small', 'in1k'): (79.80, 80.10, 80.78),
        ('PVT-T 224', 'pvt-tiny', 'in1k'): (75.10, 77.80, 78.53),
        ('PVT-S 224', 'pvt-small', 'in1k'): (79.80, 81.70, 81.96),
        ('Swin-T 224', 'swin-tiny', 'in1k'): (81.30, 82.10, 82.25),
    }
    return [Row('Table 1', f'{label} / {name}', (f'{model}_{row}', ), data, {'top-1': value})
            for (label, model, data), row_values in values.items()
            for row, name, value in zip(('softmax', 'flatten', 'lisa'), ('softmax', 'FLatten', 'LiSA'), row_values)]


def _rows_2() -> list[Row]:
    top1 = {'tiny': (81.4, 82.4), 'small': (83.8, 84.1), 'base': (84.3, 85.0)}
    rows = [Row('Table 2', f'BiFormer-{size[0].upper()} / {name}', keys, 'in1k', {'top-1': value})
            for size, values in top1.items()
            for name, keys, value in zip(
                ('BiFormer', 'LiSA'),
                ((f'biformer-{size}_bra', f'biformer-{size}_biformer', f'biformer-{size}_softmax'),
                 (f'biformer-{size}_lisa', )), values)]
    return rows + [Row('Table 2', f'BiFormer-S Semantic FPN ADE20K / {name}', keys, r'ade20k(-512x512)?',
                       {'mIoU': value})
                   for name, keys, value in (('BiFormer', ('fpn_biformer-s', ), 48.9),
                                             ('LiSA', ('fpn_lisa-biformer-s', ), 49.5))]


def _rows_3() -> list[Row]:
    values = {  # ADE20K (mIoU, mAcc) of the baseline, FLatten, LiSA
        ('PVT-T Semantic FPN', 'fpn', 'pvt-t', 'PVT'): ((36.57, 46.72), (37.21, 48.95), (40.85, 51.75)),
        ('Swin-T UperNet', 'upernet', 'swin-t', 'Swin'): ((44.51, 55.61), (44.82, 57.01), (45.03, 56.40)),
    }
    return [Row('Table 3', f'{label} / {name}', (f'{head}_{prefix}{backbone}', ), 'ade20k-512x512',
                {'mIoU': miou, 'mAcc': macc})
            for (label, head, backbone, base), row_values in values.items()
            for prefix, name, (miou, macc) in zip(('', 'flatten-', 'lisa-'), (base, 'FLatten', 'LiSA'), row_values)]


def _rows_4() -> list[Row | Gain]:
    paper = {  # COCO Mask R-CNN 1x: box AP, mask AP (no FLatten rows in the paper)
        'pvt-t': ((36.7, 35.1), None, (40.5, 37.6)),
        'swin-t': ((43.7, 39.8), None, (44.5, 40.3)),
    }
    rows: list[Row | Gain] = []
    for backbone, row_values in paper.items():
        base = 'PVT-T' if backbone == 'pvt-t' else 'Swin-T'
        for prefix, name, values in zip(('', 'flatten-', 'lisa-'), (base, 'FLatten', 'LiSA'), row_values):
            box, mask = values or (None, None)
            rows.append(Row('Table 4', f'{base} / {name}', (f'mask-rcnn_{prefix}{backbone}_fpn', ), 'coco',
                            {'box AP': box, 'box AP50': None, 'box AP75': None,
                             'mask AP': mask, 'mask AP50': None, 'mask AP75': None}))
    rows.append(Gain('Table 4', 'PVT-T: LiSA - PVT-T', 'PVT-T / LiSA', 'PVT-T / PVT-T',
                     {'box AP': 3.8, 'box AP50': 3.7, 'box AP75': 4.8, 'mask AP': 2.5, 'mask AP50': 3.0,
                      'mask AP75': 2.9}))
    rows.append(Gain('Table 4', 'Swin-T: LiSA - Swin-T', 'Swin-T / LiSA', 'Swin-T / Swin-T',
                     {'box AP': 0.8, 'mask AP': 0.5}))
    return rows


MINI = r'.*mini.*'
"""Data field of the ablations' configs: the paper runs them on mini-ImageNet."""


def _rows_ablations() -> list[Row]:
    fig3 = {1: (73.34, 0.64), 2: (75.43, 0.56), 3: (75.63, 0.39), 4: (75.16, 0.13), 5: (75.73, 0.47)}
    rows = [Row('Fig. 3', f'DeiT-T, T = {t}', (f'deit-tiny_lisa-t{t}', ) + (('deit-tiny_lisa', ) if t == 3 else ()),
                MINI, {'top-1': mean}, {'top-1': std}) for t, (mean, std) in fig3.items()]
    rows += [Row('Table 5', f'DeiT-S / {name}', keys, 'in1k', {'top-1': value}) for name, keys, value in (
        ('softmax', ('deit-small_softmax', ), 79.8), ('FLatten', ('deit-small_flatten', ), 80.1),
        ('linear angular', ('deit-small_angular', 'deit-small_linear-angular'), 79.21),
        ('linear', ('deit-small_linear', ), None), ('LiSA', ('deit-small_lisa', ), 80.78))]
    rows += [Row('Table 6', f'{model} / {name}', (f'{key}_lisa-t5{suffix}', ), MINI, {'top-1': value})
             for model, key, values in (('DeiT-T', 'deit-tiny', (73.7, 73.4, 76.3)),
                                        ('DeiT-S', 'deit-small', (78.3, 78.1, 80.7)))
             for name, suffix, value in zip(('global only', 'local only', 'learned alpha'),
                                            ('-global', '-local', ''), values)]
    table7 = {('LA', 'deit-tiny_la'): (65.7, 65.9, 73.3, 74.4), ('GL', 'deit-tiny_gl-t5'): (69.2, 69.3, 75.2, 76.3)}
    for (kernel, key), values in table7.items():
        for extras, suffix, value in zip(('', ' + F', ' + D', ' + F + D'), ('', '-f', '-d', '-fd'), values):
            keys = (f'{key}{suffix}', ) + (('deit-tiny_lisa-t5', ) if kernel == 'GL' and suffix == '-fd' else ())
            rows.append(Row('Table 7', f'DeiT-T {kernel}{extras}', keys, MINI, {'top-1': value}))
    rows += [Row('Table 8', f'DeiT-T / {name}', (key, ), MINI, {'top-1': value})
             for name, key, value in (('ReLU', 'deit-tiny_lisa-t5', 76.3), ('ELU+1', 'deit-tiny_lisa-t5-elu', 76.0))]
    return rows


ROWS: list[Row | Gain] = [*_rows_1(), *_rows_2(), *_rows_3(), *_rows_4(), *_rows_ablations()]
"""Every row of Tables 1-8 and Fig. 3, in the paper's values (see ``lisa-paper.md``)."""
TABLES = {
    'Table 1': 'ImageNet-1K top-1 (%), 300 epochs from scratch, T = 3',
    'Table 2': 'BiFormer with LiSA: ImageNet-1K top-1 (%), ADE20K mIoU (%)',
    'Table 3': 'ADE20K semantic segmentation (%), ImageNet-1K pretrained backbones',
    'Table 4': 'COCO Mask R-CNN 1x, box and mask AP (%)',
    'Table 5': 'DeiT-S linear-attention baselines, ImageNet-1K top-1 (%)',
    'Fig. 3': 'Truncation depth T, DeiT-T on mini-ImageNet, top-1 (%), mean +- std over seeds',
    'Table 6': 'Global / local / learned alpha, mini-ImageNet, T = 5, top-1 (%)',
    'Table 7': 'Kernel (LA plain linear, GL LiSA) +- focusing F +- depthwise conv D, DeiT-T, mini-ImageNet',
    'Table 8': 'Feature map, DeiT-T, mini-ImageNet, T = 5, top-1 (%)',
    'Table 13': ('DeiT-T, batch 1 (tools/benchmark_model.py): latency of a training step (ms), memory (MiB: '
                 'CUDA peak, on the CPU the bytes saved for backward)'),
}


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
