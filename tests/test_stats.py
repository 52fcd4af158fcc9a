"""The statistics of :mod:`lipnb.stats`: the bootstrap slope, the least-squares line and Student intervals."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given

from lipnb.stats import bootstrap_slope, fit_line, student_interval

F64 = torch.float64


def test_bootstrap_slope_recovers_a_line_and_covers_a_noisy_one() -> None:
    x = torch.log(torch.tensor([8.0, 16, 32, 64]).repeat_interleave(3))
    slope, low, high = bootstrap_slope(x, 0.5 * x + 1.0)
    assert abs(slope - 0.5) < 1e-12 and abs(low - 0.5) < 1e-12 and abs(high - 0.5) < 1e-12
    noise = 0.05 * torch.randn(len(x), generator=torch.Generator().manual_seed(0), dtype=F64)
    slope, low, high = bootstrap_slope(x, 0.25 * x + noise)
    assert low < 0.25 < high and low < slope < high


def test_fit_line_and_student_interval() -> None:
    x = torch.linspace(0, 1, 11, dtype=F64)
    fit = fit_line(x, 3 * x + 1 + 1e-3 * torch.sin(37 * x))
    assert abs(fit.slope - 3) < 1e-2 and fit.low < fit.slope < fit.high
    mean, low, high = student_interval(torch.tensor([1.0, 2.0, 3.0]))
    assert mean == 2.0 and low < 2.0 < high


@given(slope=st.floats(-3, 3), intercept=st.floats(-5, 5), noise=st.floats(1e-3, 0.5), seed=st.integers(0, 2**31 - 1))
def test_fit_line_recovers_any_line_and_its_interval_covers_it(slope: float, intercept: float, noise: float,
                                                               seed: int) -> None:
    """Exact data give the slope to rounding; symmetric noise (each residual paired with its negative) keeps the
    least-squares slope exact, and the interval around it then contains the truth and widens with the noise."""
    x = torch.linspace(0, 5, 12, dtype=torch.float64)
    exact = fit_line(x, slope * x + intercept)
    assert exact.slope == pytest.approx(slope, abs=1e-9) and exact.intercept == pytest.approx(intercept, abs=1e-9)
    e = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * noise
    xs = torch.cat([x[:6], x[:6]])
    noisy = fit_line(xs, slope * xs + intercept + torch.cat([e, -e]))
    assert noisy.slope == pytest.approx(slope, abs=1e-9)
    assert noisy.low <= slope <= noisy.high and noisy.high - noisy.low > 0
