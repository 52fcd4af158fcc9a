"""A check's margin is always a number: an infinite threshold (bound, end or reference), whose relative margin is
undefined, is refused before anything enters the ledger; an infinite value is still decided by the comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lipnb import report
from lipnb.report import check

finite = st.floats(-1e6, 1e6, allow_nan=False)
infinite = st.sampled_from([math.inf, -math.inf])


@pytest.fixture(autouse=True)
def empty_ledger() -> None:
    """Each test starts with an empty ledger."""
    report.checks._LEDGER.clear()


@given(finite, infinite)
def test_an_infinite_threshold_is_refused_and_leaves_no_entry(value: float, threshold: float) -> None:
    report.checks._LEDGER.clear()
    calls = {"bound": (lambda: check.below("v below", value, threshold),
                       lambda: check.above("v above", value, [threshold, 1.0])),
             "low": (lambda: check.between("v in", value, threshold, 2e6),),
             "high": (lambda: check.between("v in", value, -2e6, np.array([threshold])),),
             "reference": (lambda: check.close("v close", value, threshold, rtol=0.1),)}
    for name, group in calls.items():
        for call in group:
            with pytest.raises(ValueError, match=f"{name} is infinite"):
                call()
    assert report.checks._LEDGER == []


@given(finite.filter(lambda b: b != 0), infinite)
def test_an_infinite_value_is_decided_by_the_comparison(bound: float, value: float) -> None:
    report.checks._LEDGER.clear()
    if value < bound:
        assert check.below("-inf is below", value, bound) >= 0.5
    else:
        with pytest.raises(AssertionError, match="FAILS"):
            check.below("inf is not below", value, bound)
    assert all(not math.isnan(entry.margin) for entry in report.checks._LEDGER)
