"""MMEngine's ``scalars.json``, the one reader of a run's logged values.

MMEngine's ``LocalVisBackend`` writes ``<work dir>/<YYYYMMDD_HHMMSS>/vis_data/scalars.json``: one
JSON object a line, a training line every ``log_interval`` iterations (``loss``, ``lr``, ``time``,
``data_time``, ``iter``, ``step``...) and a line of metrics after each validation
(``accuracy/top1``, ``mIoU``, ``coco/bbox_mAP``...). Every start of a work dir (a resumed run, a
test) opens a new timestamped folder with its own log. The result tables
(:mod:`.results`), the seed report (``tools/report_seeds.py``), the demo (``tools/demo.py``) and
the long-range sweep (``tools/long_range.py``) read their values here, so that where the file lies,
which log counts and which lines are training lines is decided once.

The standard library only, as :mod:`.results`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

SCALARS = Path('vis_data', 'scalars.json')
"""The log under a timestamped run folder."""


def scalars_files(work_dir: Path) -> list[Path]:
    """The logs of every start of ``work_dir``, oldest first (their timestamp folders' order)."""
    return sorted(Path(work_dir).glob(f'*/{SCALARS.as_posix()}'), key=lambda p: p.parent.parent.name)


def entries(log: Path) -> list[dict]:
    """The lines of one log, in order (blank lines skipped)."""
    return [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]


def values(log: Path, key: str) -> list[float]:
    """``key``'s value on each line of ``log`` that holds it, in order."""
    return [entry[key] for entry in entries(log) if key in entry]


def last_entry(log: Path, keys: Iterable[str]) -> dict:
    """The last line of ``log`` on which one of ``keys`` holds a number (the last validation of those
    metrics), ``{}`` if none does."""
    keys = tuple(keys)
    found = [entry for entry in entries(log) if any(isinstance(entry.get(k), (int, float)) for k in keys)]
    return found[-1] if found else {}


def run_metric(work_dir: Path, metric: str, reduce: str = 'last') -> float:
    """``metric`` of the run in ``work_dir``: at its last validation (``reduce='last'``) or its best
    (``'max'``), from the newest log that holds it (a resumed run's newest start may not have validated yet).

    Raises FileNotFoundError when no log holds it.
    """
    if reduce not in ('last', 'max'):
        raise ValueError(f"reduce={reduce!r}; expected 'last' or 'max'")
    for log in reversed(scalars_files(work_dir)):
        found = values(log, metric)
        if found:
            return found[-1] if reduce == 'last' else max(found)
    raise FileNotFoundError(f'no {metric!r} in any {work_dir}/*/{SCALARS.as_posix()}')


def training_values(work_dir: Path, key: str) -> list[float]:
    """``key`` on every training line (those with a ``loss``) of every log of ``work_dir``, oldest first:
    e.g. the seconds per iteration, ``'time'``."""
    return [entry[key] for log in scalars_files(work_dir) for entry in entries(log) if key in entry and 'loss' in entry]
