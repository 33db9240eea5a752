"""Means with their standard deviation or Student-t intervals and paired differences, against values
computed by hand (t quantiles from a printed table: t(0.975, 2) = 4.303, t(0.975, 3) = 3.182)."""
import math

import pytest

from projects.lisa.analysis.statistics import Interval, mean_interval, mean_std, paired_difference, solved_share


def test_mean_std_is_the_sample_standard_deviation_over_n_minus_one():
    # mean 75; squared deviations 4, 0, 4: s = sqrt(8 / 2) = 2 (sqrt(8 / 3) = 1.63 over n)
    assert mean_std([73.0, 75.0, 77.0]) == (75.0, 2.0)
    mean, std = mean_std([7.0])
    assert mean == 7.0 and math.isnan(std)
    with pytest.raises(ValueError, match='no values'):
        mean_std([])


def test_mean_interval_of_four_values():
    # mean 2.5, s = sqrt(5/3) = 1.2910, s / sqrt(4) = 0.6455, half width 3.182 * 0.6455 = 2.054
    got = mean_interval([1, 2, 3, 4])
    assert got.mean == 2.5 and got.n == 4
    assert got.low == pytest.approx(2.5 - 2.054, abs=1e-3) and got.high == pytest.approx(2.5 + 2.054, abs=1e-3)
    assert got.excludes_zero and got.format() == '2.5 [0.4, 4.6]'


def test_a_single_value_has_no_interval_and_a_wider_level_widens_it():
    one = mean_interval([7.0])
    assert one.mean == 7.0 and math.isnan(one.low) and one.format() == '7.0' and not one.excludes_zero
    assert mean_interval([1, 2, 3, 4], 0.99).high > mean_interval([1, 2, 3, 4], 0.95).high


def test_paired_difference_uses_the_runs_both_have():
    # differences 1, 3, 1 (run 4 has no partner): mean 5/3, s = sqrt(4/3), half width 4.303 * s / sqrt(3) = 2.869
    a, b = {1: 10, 2: 12, 3: 11}, {1: 9, 2: 9, 3: 10, 4: 50}
    got = paired_difference(a, b)
    assert got.n == 3 and got.mean == pytest.approx(5 / 3)
    assert (got.low, got.high) == (pytest.approx(5 / 3 - 2.869, abs=1e-3), pytest.approx(5 / 3 + 2.869, abs=1e-3))
    assert not got.excludes_zero and got.format(signed=True) == '+1.7 [-1.2, +4.5]'
    # differences 10, 8, 9, 9: mean 9, s = 0.8165, half width 3.182 * 0.4082 = 1.299
    d = paired_difference({0: 100, 1: 100, 2: 100, 3: 99}, {0: 90, 1: 92, 2: 91, 3: 90})
    assert (d.low, d.high) == (pytest.approx(7.701, abs=1e-3), pytest.approx(10.299, abs=1e-3)) and d.excludes_zero
    assert Interval(-3.0, -5.0, -1.0, 4).excludes_zero


def test_bad_input_is_named():
    with pytest.raises(ValueError, match='no run in common'):
        paired_difference({1: 1.0}, {2: 1.0})
    with pytest.raises(ValueError, match='of no values'):
        mean_interval([])
    with pytest.raises(ValueError, match='confidence=1.5'):
        mean_interval([1, 2], 1.5)


def test_solved_share_counts_runs_at_the_threshold():
    assert solved_share([95.0, 94.9, 100.0, 82.0], 95) == (2, 4)
