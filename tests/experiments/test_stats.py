"""The statistics of :mod:`lipnb.experiments.stats`: the bootstrap slope, the least-squares line and Student
intervals."""

from __future__ import annotations

import hypothesis.strategies as st
import pandas as pd
import pytest
import torch
from hypothesis import given
from scipy import stats as scipy_stats

from lipnb.experiments.stats import (
    EXPONENT_MARGIN,
    bootstrap_slope,
    fit_line,
    growth_fits,
    lack_of_fit,
    local_slopes,
    mean_curve_slope,
    side,
    side_phrase,
    student_interval,
)

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


def _replicated(curve, seed: int, noise: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """log n and log of ``curve(n)`` times log-normal noise, ten replicates at each of five lengths."""
    n = torch.tensor([2.0, 26, 50, 74, 98], dtype=F64).repeat_interleave(10)
    e = noise * torch.randn(len(n), dtype=F64, generator=torch.Generator().manual_seed(seed))
    return n.log(), curve(n).log() + e


def test_lack_of_fit_equals_the_nested_model_comparison() -> None:
    """F against an independent computation: the line (numpy.polyfit) nested in one mean per length (dummy lstsq)."""
    import numpy as np

    x, y = _replicated(lambda n: n / (n + 20), seed=3)
    line = np.polyval(np.polyfit(x.numpy(), y.numpy(), 1), x.numpy())
    dummies = (x[:, None] == torch.unique(x)[None, :]).to(F64)
    means = dummies @ torch.linalg.lstsq(dummies, y[:, None]).solution[:, 0]
    rss_line, rss_means = float(((y.numpy() - line) ** 2).sum()), float((y - means).square().sum())
    expected = (rss_line - rss_means) / 3 / (rss_means / 45)
    test = lack_of_fit(x, y)
    assert (test.df_lack, test.df_error) == (3, 45) and test.F == pytest.approx(expected, rel=1e-9)


def test_lack_of_fit_accepts_a_power_law_and_rejects_a_saturating_curve() -> None:
    """An exact power law with noise passes at the test's level (about 5% of seeds below p = 0.05); a curve that
    saturates, ``n / (n + 20)``, with the same noise is rejected far below any usual level."""
    p = torch.tensor([lack_of_fit(*_replicated(lambda n: 0.4 * n**0.25, seed)).p for seed in range(200)])
    assert 0.01 <= float((p < 0.05).double().mean()) <= 0.10
    assert lack_of_fit(*_replicated(lambda n: n / (n + 20), seed=0)).p < 1e-8


def test_local_slopes_of_a_power_law_and_of_a_saturating_curve() -> None:
    n = torch.tensor([2.0, 4, 8, 16]).repeat_interleave(2)
    assert torch.allclose(local_slopes(n, 3 * n**0.3), torch.full((3,), 0.3, dtype=F64))
    slopes = local_slopes(n, n / (n + 4))
    assert bool((slopes.diff() < 0).all())


def test_lack_of_fit_refuses_data_it_cannot_test() -> None:
    x = torch.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="replicates"):
        lack_of_fit(x, x)
    with pytest.raises(ValueError, match="replicates"):
        lack_of_fit(torch.tensor([1.0, 1, 2, 2]), torch.tensor([1.0, 2, 3, 4]))
    with pytest.raises(ValueError, match="positive"):
        local_slopes([1, 2], [1.0, -1.0])


def test_side_places_an_interval_against_a_threshold_with_its_margin() -> None:
    assert side(0.6, 0.7, 0.5, 0.05) == "above"
    assert side(0.52, 0.7, 0.5, 0.05) == "above, within the margin"
    assert side(0.3, 0.4, 0.5, 0.05) == "below"
    assert side(0.3, 0.48, 0.5, 0.05) == "below, within the margin"
    assert side(0.45, 0.55, 0.5, 0.05) == "contains it"
    assert side(0.52, 0.7) == "above, within the margin" and EXPONENT_MARGIN == 0.05


def test_side_phrase_reads_in_a_sentence() -> None:
    assert [side_phrase(*i) for i in ((0.6, 0.7), (0.52, 0.7), (0.3, 0.4), (0.3, 0.48), (0.45, 0.55))] == [
        "above 1/2", "above 1/2 by less than the margin", "below 1/2", "below 1/2 by less than the margin",
        "containing 1/2"]
    assert side_phrase(0.1, 0.2, 0.0, 0.05, "0") == "above 0"
    with pytest.raises(TypeError, match="name"):
        side_phrase(0.1, 0.2, name="")
    with pytest.raises(ValueError):
        side_phrase(0.7, 0.6)


def test_mean_curve_slope_is_the_student_line_through_the_means_by_hand() -> None:
    """Against a hand computation: the per-length means, their least-squares slope, its standard error and scipy's
    Student quantile on G - 2 degrees of freedom; with equal replicates the slope is that of all the points."""
    x, y = _replicated(lambda n: n / (n + 20), seed=5)
    levels = torch.unique(x)
    means = torch.stack([y[x == v].mean() for v in levels])
    xc = levels - levels.mean()
    slope = float((xc * (means - means.mean())).sum() / xc.square().sum())
    residual = means - means.mean() - slope * xc
    se = float((residual.square().sum() / (len(levels) - 2) / xc.square().sum()).sqrt())
    half = float(scipy_stats.t.ppf(0.975, len(levels) - 2)) * se
    fit = mean_curve_slope(x, y)
    assert fit.slope == pytest.approx(slope, rel=1e-12)
    assert (fit.low, fit.high) == pytest.approx((slope - half, slope + half), rel=1e-12)
    assert fit.slope == pytest.approx(bootstrap_slope(x, y)[0], rel=1e-12)
    with pytest.raises(ValueError, match="3 distinct"):
        mean_curve_slope(torch.tensor([1.0, 1, 2, 2]), torch.tensor([1.0, 2, 3, 4]))


def test_the_interval_on_the_means_widens_with_lack_of_fit_where_the_bootstrap_does_not() -> None:
    """A curve that bends (rejected by the lack-of-fit test) with little scatter: the bootstrap within each length
    gives an interval far narrower than the Student interval on the means, which sees the bend; growth_fits
    reports either on request."""
    x, y = _replicated(lambda n: n / (n + 20), seed=1, noise=0.01)
    assert lack_of_fit(x, y).p < 1e-8
    _, low, high = bootstrap_slope(x, y)
    fit = mean_curve_slope(x, y)
    assert fit.high - fit.low > 5 * (high - low)
    table = pd.DataFrame({"k": 0, "n": x.exp().round().numpy(), "lip": y.exp().numpy()})
    means = growth_fits(table, ["k"], interval="means").iloc[0]
    assert (means.alpha, means.low, means.high) == pytest.approx((fit.slope, fit.low, fit.high), rel=1e-9)
    with pytest.raises(ValueError, match="interval"):
        growth_fits(table, ["k"], interval="t")
