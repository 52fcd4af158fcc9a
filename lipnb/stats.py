"""Statistics of the sweeps: log-log fits, Student and bootstrap intervals for growth exponents."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "LineFit",
    "bootstrap_slope",
    "fit_line",
    "student_interval",
]


@dataclass(frozen=True)
class LineFit:
    """A least-squares line ``y = slope x + intercept`` with a confidence interval ``[low, high]`` on the slope."""

    slope: float
    intercept: float
    low: float
    high: float


def fit_line(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95) -> LineFit:
    """Rates of Theorem 3.7, App. C.7, Prop. 3.6: least-squares slope with its Student-t interval at ``level``."""
    from scipy import stats

    x = torch.as_tensor(x, dtype=torch.float64).flatten().numpy()
    y = torch.as_tensor(y, dtype=torch.float64).flatten().numpy()
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 2)) * fit.stderr
    return LineFit(float(fit.slope), float(fit.intercept), float(fit.slope - half), float(fit.slope + half))


def student_interval(values: torch.Tensor, *, level: float = 0.95) -> tuple[float, float, float]:
    """App. C.7: mean of independent replicates and its Student-t interval ``(mean, low, high)`` at ``level``."""
    from scipy import stats

    v = torch.as_tensor(values, dtype=torch.float64).flatten().numpy()
    low, high = stats.t.interval(level, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    return float(v.mean()), float(low), float(high)


def bootstrap_slope(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
    """Growth exponents (Sec. 5): least-squares slope of ``y`` on ``x`` and its percentile bootstrap interval.

    Points are resampled within each distinct ``x`` (each sequence length keeps its number of sequences),
    so the interval reflects the spread between sequences. Returns ``(slope, low, high)``.
    """
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    g = torch.Generator().manual_seed(seed)
    groups = [torch.nonzero(x == v).flatten() for v in torch.unique(x)]
    picks = torch.cat([idx[torch.randint(len(idx), (resamples, len(idx)), generator=g)] for idx in groups], 1)
    xs, ys = x[picks], y[picks]
    xc = xs - xs.mean(1, keepdim=True)
    slopes = (xc * (ys - ys.mean(1, keepdim=True))).sum(1) / xc.square().sum(1)
    xc0 = x - x.mean()
    slope = float((xc0 * (y - y.mean())).sum() / xc0.square().sum())
    low, high = torch.quantile(slopes, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return slope, float(low), float(high)
