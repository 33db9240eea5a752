"""Means over runs with their spread or confidence intervals, and paired differences between methods.

:func:`mean_std` is the mean and sample standard deviation (``n - 1``) that the paper reports over
its seeds (Fig. 3) and that ``tools/collect_results.py`` and ``tools/report_seeds.py`` set beside it.
For ``n`` values with mean ``m`` and sample standard deviation ``s`` the two-sided interval at
level ``c`` is Student's ``m ± t_{(1 + c) / 2, n - 1} · s / √n``. A comparison of two methods run on
the same seeds and data draws is paired: the interval is that of the per-run differences
``a_r - b_r`` over the runs both have, and the methods differ only when it excludes 0.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` values and its confidence interval ``[low, high]`` (NaN for ``n < 2``)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def format(self, digits: int = 1, signed: bool = False) -> str:
        """``'92.1 [88.0, 96.2]'`` (``'+2.6 [-7.9, +13.1]'`` when signed); the mean alone for n = 1."""
        sign = '+' if signed else ''
        if math.isnan(self.low):
            return f'{self.mean:{sign}.{digits}f}'
        return f'{self.mean:{sign}.{digits}f} [{self.low:{sign}.{digits}f}, {self.high:{sign}.{digits}f}]'


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and their sample standard deviation (``n - 1``; NaN for one value)."""
    if not values:
        raise ValueError('mean_std of no values')
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values, mean) if len(values) > 1 else math.nan


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` and its Student-t interval at level ``confidence``."""
    from scipy.stats import t as student_t  # here: mean_std, which results.py uses, needs the standard library alone

    if not values:
        raise ValueError('mean_interval of no values')
    if not 0 < confidence < 1:
        raise ValueError(f'confidence={confidence} must lie in (0, 1)')
    n, (mean, std) = len(values), mean_std(values)
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    half = student_t.ppf((1 + confidence) / 2, n - 1) * std / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_difference(a: Mapping[Hashable, float], b: Mapping[Hashable, float],
                      confidence: float = 0.95) -> Interval:
    """The interval of ``a[r] - b[r]`` over the runs ``r`` that both hold."""
    common = [r for r in a if r in b]
    if not common:
        raise ValueError(f'no run in common: {sorted(map(str, a))} vs {sorted(map(str, b))}')
    return mean_interval([a[r] - b[r] for r in common], confidence)


def solved_share(values: Sequence[float], threshold: float) -> tuple[int, int]:
    """How many of ``values`` reach ``threshold``, out of how many."""
    return sum(v >= threshold for v in values), len(values)
