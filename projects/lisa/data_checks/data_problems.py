"""What a data check finds: a :class:`Problem` (a bad file or annotation, its bad value and what is valid),
the errors that carry problems, and :func:`report`, their text.

A problem that the library would crash on or learn wrongly from is an error; one the library drops by design
(e.g. the two zero-height boxes of the official ``instances_train2017.json``) is a note, listed but not fatal.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LISTED = 20
"""Problems quoted in an error message; ``tools/check_data.py`` lists all."""


class DataError(RuntimeError):
    """A dataset or one of its samples could not be loaded or is invalid; the message names the files."""


class DataProblems(DataError):
    """Invalid annotations found while a dataset loaded; ``problems`` holds them all."""

    def __init__(self, problems: list[Problem], context: str = '') -> None:
        self.problems = problems
        super().__init__(f'{context}{report(problems, limit=LISTED)}')


@dataclass(frozen=True)
class Problem:
    """One bad file or annotation: ``problem`` holds the bad value, ``valid`` what would be valid.

    ``error`` is False for items a library drops by design (listed as notes).
    """

    file: str
    problem: str
    valid: str
    where: str = ''
    error: bool = True

    def __str__(self) -> str:
        where = f' ({self.where})' if self.where else ''
        return f'{self.file}{where}: {self.problem}; valid: {self.valid}'


def report(problems: Sequence[Problem], limit: int | None = None) -> str:
    """The problems as text, errors first; at most ``limit`` of each kind quoted."""
    lines = []
    notes = ' (not fatal: items the library drops, classes a split lacks)'
    for error, title, comment in ((True, 'error', ''), (False, 'note', notes)):
        group = [p for p in problems if p.error == error]
        if not group:
            continue
        lines.append(f'{len(group)} {title}{"s" if len(group) > 1 else ""}{comment}:')
        lines += [f'  {p}' for p in group[:limit]]
        if limit is not None and len(group) > limit:
            lines.append(f'  ... and {len(group) - limit} more: `python tools/check_data.py CONFIG` lists all')
    return '\n'.join(lines)


def ranges(values: Iterable[int]) -> str:
    """Sorted integers as compact ranges: ``1..11, 13..25, 27``."""
    values = sorted(set(values))
    spans: list[list[int]] = []
    for value in values:
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ', '.join(str(a) if a == b else f'{a}..{b}' for a, b in spans)
