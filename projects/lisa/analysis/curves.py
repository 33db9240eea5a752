"""Training curves of MMEngine runs: chosen keys of ``scalars.json`` against iterations or epochs.

``tools/analyze_logs.py plot_curve`` draws them, one subplot per key and one line per run, as the
``analyze_logs.py`` of mmdet / mmseg do for their JSON logs, with matplotlib alone. A run is a work
dir (its newest start that logged one of the keys) or a ``scalars.json`` itself; a key is a name
MMEngine logs (``loss``, ``lr``, ``mIoU``, ``coco/bbox_mAP``, ``decode.loss_ce``) or its last part
after a ``/`` or ``.`` (``bbox_mAP``, ``top1``, ``loss_ce``).

The x axis: training lines carry ``iter``; a validation line carries ``step``, which MMEngine's
``LoggerHook`` sets to the epoch in a run trained by epoch (``log_metric_by_epoch``, its default)
and to the iteration otherwise. A metric is drawn against epochs when the training lines carry an
``epoch`` and no validation step goes past the last one of them.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .scalars import entries, scalars_files


@dataclass(frozen=True)
class Series:
    """One key of one run: its values and where along training they were logged."""

    key: str  # as logged, e.g. 'coco/bbox_mAP'
    x: list[float]
    y: list[float]
    x_name: str  # 'iter' or 'epoch'


def _logged_key(key: str, logged: Sequence[str]) -> str | None:
    """``key`` as the log names it: itself, or the one logged key whose last ``/`` or ``.`` part it is."""
    if key in logged:
        return key
    found = [name for name in logged if re.split(r'[/.]', name)[-1] == key]
    if len(found) > 1:
        raise ValueError(f'key {key!r} is ambiguous: the log holds {found}; give one of them')
    return found[0] if found else None


def find_log(path: str | Path, keys: Sequence[str] = ()) -> Path:
    """The ``scalars.json`` of ``path``: the file itself, or the newest start of the work dir that logged
    one of ``keys`` (the newest start at all without keys)."""
    path = Path(path)
    if path.is_file():
        return path
    logs = scalars_files(path)
    if not logs:
        raise FileNotFoundError(f'{path}: neither a scalars.json nor a work dir holding <timestamp>/vis_data/'
                                'scalars.json (the log MMEngine writes while training)')
    for log in reversed(logs):
        logged = {name for entry in entries(log) for name in entry}
        if not keys or any(_logged_key(key, sorted(logged)) for key in keys):
            return log
    return logs[-1]


def run_name(path: str | Path) -> str:
    """The work dir's name, for a work dir or a log inside one (``<work dir>/<timestamp>/vis_data/scalars.json``)."""
    path = Path(path)
    if path.is_file() and path.parent.name == 'vis_data' and len(path.parents) > 3:
        return path.parents[2].name
    return path.resolve().name if path.is_dir() else path.name


def read_series(log: Path, keys: Sequence[str]) -> dict[str, Series]:
    """Each of ``keys`` (as asked for) in ``log``; a ValueError naming the keys it holds if one is not there."""
    lines = entries(log)
    logged = sorted({name for entry in lines for name in entry})
    train = [entry for entry in lines if 'iter' in entry]
    epochs = [entry['epoch'] for entry in train if 'epoch' in entry]
    found = {}
    for key in keys:
        name = _logged_key(key, logged)
        if name is None:
            raise ValueError(f'{log} has no key {key!r}; it holds: {", ".join(logged)}')
        if any(name in entry for entry in train):
            points = [(entry['iter'], entry[name]) for entry in train if name in entry]
            x_name = 'iter'
        else:
            points = [(entry['step'], entry[name]) for entry in lines if name in entry]
            x_name = 'epoch' if epochs and all(x <= max(epochs) for x, _ in points) else 'iter'
        found[key] = Series(name, [x for x, _ in points], [y for _, y in points], x_name)
    return found


def plot_curves(runs: dict[str, dict[str, Series]], keys: Sequence[str], title: str | None = None):
    """A matplotlib Figure: one subplot per key (stacked), one line per run labelled by its name in ``runs``."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global figure state

    figure = Figure(figsize=(8, 3 * len(keys)), layout='constrained')
    axes = figure.subplots(len(keys), 1, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys):
        x_names = set()
        for label, series in runs.items():
            line = series[key]
            ax.plot(line.x, line.y, label=label, marker='o' if len(line.x) < 20 else None)
            x_names.add(line.x_name)
        ax.set_ylabel(key)
        ax.set_xlabel(' / '.join(sorted(x_names)))
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        figure.suptitle(title)
    return figure


def plot_runs(paths: Sequence[str | Path], keys: Sequence[str], out: str | Path, legend: Sequence[str] | None = None,
              title: str | None = None):
    """Read ``keys`` of each run in ``paths`` and save the curves to ``out`` (PNG, PDF...); the Figure."""
    if legend is not None and len(legend) != len(paths):
        raise ValueError(f'{len(legend)} legend labels for {len(paths)} runs; give one label per run')
    labels = list(legend) if legend else [run_name(path) for path in paths]
    if len(set(labels)) != len(labels):
        if legend:
            raise ValueError(f'--legend names two runs alike: {labels}')
        labels = [str(path) for path in paths]
    runs = {label: read_series(find_log(path, keys), keys) for label, path in zip(labels, paths)}
    figure = plot_curves(runs, keys, title)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    return figure
