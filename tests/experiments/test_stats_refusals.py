"""Statistics and verdicts give the right answer or a clear refusal: a level is a number in (0, 1), an interval of
data with no spread is the point itself, power-law fits take positive finite points of one length, a bootstrap
needs spread to resample, an empty table has empty fits, a group needs a key, and a NaN interval has no verdict."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb.experiments import stats, verdicts

finite = st.floats(-1e6, 1e6, allow_nan=False)
positive = st.floats(1e-3, 1e6)
not_levels = st.one_of(st.text(max_size=4), st.none(), st.booleans(), st.just(math.nan), st.just(0.0),
                       st.just(1.0), st.floats(1.0, 10.0), st.floats(-10.0, 0.0), st.just([0.95]))


@given(not_levels)
def test_a_level_that_is_not_a_number_in_the_unit_interval_is_refused(level: object) -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    y = x + torch.tensor([0.1, -0.1, 0.2, -0.2, 0.05, 0.0])
    for call in (lambda: stats.student_interval(x, level=level), lambda: stats.fit_line(x, y, level=level),
                 lambda: stats.bootstrap_slope(x, y, level=level)):
        with pytest.raises((TypeError, ValueError), match="level"):
            call()


@given(finite, st.integers(2, 20), st.floats(0.5, 0.999))
def test_an_interval_of_data_with_no_spread_is_the_point_itself(value: float, count: int, level: float) -> None:
    assert stats.student_interval(torch.full((count,), value, dtype=torch.float64), level=level) == (value,) * 3


@given(st.lists(st.tuples(positive, positive), min_size=6, max_size=12, unique_by=lambda p: p[0]),
       st.integers(0, 5), st.sampled_from([0.0, -1.0, math.nan, math.inf]), st.booleans())
def test_power_law_fits_refuse_points_they_cannot_take_the_log_of(points: list, at: int, bad: float,
                                                                   in_n: bool) -> None:
    n, lip = (list(v) for v in zip(*points, strict=True))
    (n if in_n else lip)[at] = bad
    name = "n" if in_n else "lip"
    for call in (lambda: stats.power_law_break(n, lip), lambda: stats.local_slopes(n, lip)):
        with pytest.raises(ValueError, match=name):
            call()


@given(st.integers(6, 12), st.integers(1, 3))
def test_power_law_fits_refuse_lists_of_different_lengths(count: int, extra: int) -> None:
    n = list(range(1, count + 1))
    for call in (lambda: stats.power_law_break(n, n + [1] * extra), lambda: stats.local_slopes(n[:-extra], n)):
        with pytest.raises(ValueError, match="same number"):
            call()


@given(st.lists(finite, min_size=3, max_size=8, unique=True), st.lists(finite, min_size=8, max_size=8))
def test_a_bootstrap_with_one_point_per_length_is_refused(x: list, y: list) -> None:
    with pytest.raises(ValueError, match="one point per distinct value"):
        stats.bootstrap_slope(x, y[:len(x)])


def test_growth_fits_of_an_empty_table_are_empty_and_a_nan_key_is_refused() -> None:
    fits = stats.growth_fits(pd.DataFrame({"model": [], "layer": [], "n": [], "lip": []}), ["model", "layer"])
    assert fits.empty and list(fits.columns) == ["model", "layer", "alpha", "low", "high", "C", "lof_F", "lof_p"]
    frame = pd.DataFrame({"layer": [0.0] * 4 + [math.nan] * 4, "n": [2, 4, 8, 16] * 2, "lip": [1.0, 2, 3, 4] * 2})
    with pytest.raises(ValueError, match="'layer' has a missing value"):
        stats.growth_fits(frame, ["layer"])
    with pytest.raises(ValueError, match="resamples"):
        stats.growth_fits(frame.iloc[:0], ["layer"], resamples=0)


nan_intervals = st.tuples(st.one_of(finite, st.just(math.nan)), st.one_of(finite, st.just(math.nan))).filter(
    lambda pair: math.isnan(pair[0]) or math.isnan(pair[1]))


@given(nan_intervals, finite)
def test_a_nan_interval_has_no_verdict_and_no_side(interval: tuple, published: float) -> None:
    low, high = interval
    for call in (lambda: verdicts.interval_verdict(published, low, high), lambda: verdicts.bound_verdict(
            published, high if math.isnan(high) else math.nan), lambda: stats.side(low, high)):
        with pytest.raises((TypeError, ValueError), match=r"low|high"):
            call()
    with pytest.raises(ValueError, match="published"):
        verdicts.interval_verdict(math.nan, 0.0, 1.0)


@given(finite, finite, finite)
def test_a_finite_interval_gets_exactly_one_verdict(published: float, a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    expected = "reproduced" if low <= published <= high else "differs"
    assert verdicts.interval_verdict(published, low, high) == expected
    assert stats.side(low, high, published) in ("above", "below", "contains it", "above, within the margin",
                                                "below, within the margin")
