"""Statistics of the sweeps: log-log fits, Student and bootstrap intervals for growth exponents, power-law breaks,
the lack-of-fit test that says whether a power law describes the curve at all, and the margin by which an exponent's
interval must clear 1/2 (:data:`EXPONENT_MARGIN`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
import torch
from scipy import stats

from ..arguments import (
    as_paired_points,
    as_points,
    check_choice,
    check_grouped_table,
    check_level,
    check_positive_int,
    check_real,
    check_seed,
)

if TYPE_CHECKING:

    from ..results import ResultTable

__all__ = [
    "BREAK_MIN_JUMP",
    "BREAK_MIN_SIDE",
    "EXPONENT_MARGIN",
    "LackOfFit",
    "LineFit",
    "bootstrap_slope",
    "fit_line",
    "growth_fits",
    "lack_of_fit",
    "local_slopes",
    "mean_curve_slope",
    "power_law_break",
    "side",
    "side_phrase",
    "student_interval",
]


@dataclass(frozen=True)
class LineFit:
    """A least-squares line ``y = slope x + intercept`` with a confidence interval ``[low, high]`` on the slope."""

    slope: float
    intercept: float
    low: float
    high: float


def _points(x: torch.Tensor, y: torch.Tensor, level: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``y`` as flat float64 tensors, checked: same length, at least two finite points, ``0 < level < 1``."""
    check_level(level)
    x, y = as_paired_points(x, y, minimum=2)
    if bool((x == x[0]).all()):
        raise ValueError("x must take at least two distinct values to fit a slope")
    return x, y


def fit_line(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95) -> LineFit:
    """Rates of Theorem 3.7, App. C.7, Prop. 3.6: least-squares slope with its Student-t interval at ``level``.

    With two points the slope is exact and its interval undefined (``nan``).
    """

    x, y = (t.numpy() for t in _points(x, y, level))
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 2)) * fit.stderr
    return LineFit(float(fit.slope), float(fit.intercept), float(fit.slope - half), float(fit.slope + half))


def student_interval(values: torch.Tensor, *, level: float = 0.95) -> tuple[float, float, float]:
    """App. C.7: mean of independent replicates and its Student-t interval ``(mean, low, high)`` at ``level``."""

    level = check_level(level)
    v = as_points(values, "values").numpy()
    if len(v) < 2:
        raise ValueError(f"values must hold at least two finite replicates; got {v.tolist()}")
    if bool((v == v[0]).all()):
        return float(v[0]), float(v[0]), float(v[0])      # no spread: the interval is the point itself
    low, high = stats.t.interval(level, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    return float(v.mean()), float(low), float(high)


def bootstrap_slope(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
    """Growth exponents (Sec. 5): least-squares slope of ``y`` on ``x`` and its percentile bootstrap interval.

    Points are resampled within each distinct ``x`` (each sequence length keeps its number of sequences),
    so the interval reflects the spread between sequences. Returns ``(slope, low, high)``. With one point per
    distinct ``x`` there is no spread to resample: refused (:func:`fit_line` gives the Student interval).
    """
    x, y = _points(x, y, level)
    resamples = check_positive_int(resamples, "resamples")
    g = torch.Generator().manual_seed(check_seed(seed))
    groups = [torch.nonzero(x == v).flatten() for v in torch.unique(x)]
    if all(len(idx) == 1 for idx in groups):
        raise ValueError("x holds one point per distinct value: a bootstrap within lengths has no spread to resample "
                         "(use fit_line's Student interval)")
    picks = torch.cat([idx[torch.randint(len(idx), (resamples, len(idx)), generator=g)] for idx in groups], 1)
    xs, ys = x[picks], y[picks]
    xc = xs - xs.mean(1, keepdim=True)
    slopes = (xc * (ys - ys.mean(1, keepdim=True))).sum(1) / xc.square().sum(1)
    xc0 = x - x.mean()
    slope = float((xc0 * (y - y.mean())).sum() / xc0.square().sum())
    low, high = torch.quantile(slopes, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return slope, float(low), float(high)


def mean_curve_slope(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95) -> LineFit:
    """Growth exponents where one power law may not fit: the least-squares line through the mean of ``y`` at each
    distinct ``x``, with its Student-t interval on ``G - 2`` degrees of freedom (``G`` distinct ``x``).

    The means' scatter about the line holds both the spread between replicates and the curve's lack of fit
    (:func:`lack_of_fit`), so where one power law is rejected the interval widens with the misfit, which
    :func:`bootstrap_slope` (replicates resampled within each ``x``) cannot see. With the same number of replicates
    at every ``x`` the slope is the least-squares slope of all the points. Needs ``G >= 3``.
    """
    x, y = _points(x, y, level)
    levels, group = torch.unique(x, return_inverse=True)
    if len(levels) < 3:
        raise ValueError(f"a Student interval on the means needs >= 3 distinct x; got {len(levels)}")
    means = torch.zeros(len(levels), dtype=y.dtype).index_add_(0, group, y) / torch.bincount(group)
    return fit_line(levels, means, level=level)


@dataclass(frozen=True)
class LackOfFit:
    """The lack-of-fit F test of a line: ``F`` on ``(df_lack, df_error)`` degrees of freedom and its p-value."""

    F: float
    df_lack: int
    df_error: int
    p: float


def lack_of_fit(x: torch.Tensor, y: torch.Tensor) -> LackOfFit:
    """Is ``y`` linear in ``x``? The classical lack-of-fit F test, for replicates at each distinct ``x``.

    The least-squares line's residual sum of squares splits into pure error (the spread of ``y`` around the
    mean of its own ``x``, ``N - G`` degrees of freedom for ``N`` points at ``G`` distinct values) and lack of fit
    (the distance of those means from the line, ``G - 2``); ``F`` is the ratio of their mean squares. On log-log
    data, a small ``p`` says no power law ``y = C x^α`` describes the per-length means within their scatter, so
    the fitted exponent is an average of changing local slopes (:func:`local_slopes`), not a growth rate.
    """

    x, y = _points(x, y, 0.5)
    levels, group = torch.unique(x, return_inverse=True)
    G, N = len(levels), len(x)
    if G < 3 or N <= G:
        raise ValueError(f"the test needs >= 3 distinct x and replicates at some x; got {G} distinct of {N} points")
    means = torch.zeros(G, dtype=x.dtype).index_add_(0, group, y) / torch.bincount(group, minlength=G)
    pure = float((y - means[group]).square().sum())
    xc = x - x.mean()
    slope = (xc * (y - y.mean())).sum() / xc.square().sum()
    total = float((y - y.mean() - slope * xc).square().sum())
    df_lack, df_error = G - 2, N - G
    F = (total - pure) / df_lack / max(pure / df_error, 1e-300)
    return LackOfFit(F, df_lack, df_error, float(stats.f.sf(F, df_lack, df_error)))


def local_slopes(n: Sequence[float], lip: Sequence[float]) -> torch.Tensor:
    """Slopes of ``log mean(lip)`` against ``log n`` between consecutive distinct lengths (a curve's local exponent)."""
    x, y = as_paired_points(n, lip, ("n", "lip"), positive=True)
    levels, group = torch.unique(x, return_inverse=True)
    if len(levels) < 2:
        raise ValueError(f"need at least 2 distinct lengths; got {len(levels)}")
    means = torch.zeros(len(levels), dtype=y.dtype).index_add_(0, group, y) / torch.bincount(group)
    return means.log().diff() / levels.log().diff()


# The break test's defaults (:func:`power_law_break`), named so that a chapter can state them.
BREAK_MIN_SIDE, BREAK_MIN_JUMP = 3, 1.25


def power_law_break(n: Sequence[float], lip: Sequence[float], *, min_side: int = BREAK_MIN_SIDE, alpha: float = 1e-3,
                    min_jump: float = BREAK_MIN_JUMP, min_slope_change: float = 0.15) -> dict:
    """Is ``lip ~ C n^α`` one power law? Best two-segment log-log fit against one line, by an F test.

    Every split between distinct lengths with at least ``min_side`` lengths on each side is tried; the
    best is kept if its F test's p-value (anti-conservative, the split being chosen) is below ``alpha`` and the
    break matters: the two segments differ at the break by a factor ``min_jump`` or in slope by ``min_slope_change``
    (nearly noiseless data pass the F test on a negligible kink).
    Returns ``break_n`` (first length after the break, ``nan`` if none), ``p``, ``slope_before``,
    ``slope_after`` and ``jump`` (ratio of the two segments' values at the break).
    """

    min_side = check_positive_int(min_side, "min_side")
    alpha, min_jump, min_slope_change = (check_real(v, name) for v, name in (
        (alpha, "alpha"), (min_jump, "min_jump"), (min_slope_change, "min_slope_change")))
    x, y = (v.log() for v in as_paired_points(n, lip, ("n", "lip"), positive=True))
    levels = torch.unique(x)
    if len(levels) < 2 * min_side:
        raise ValueError(f"need at least {2 * min_side} distinct lengths; got {len(levels)}")

    def rss(xs: torch.Tensor, ys: torch.Tensor) -> tuple[float, float, float]:
        xc = xs - xs.mean()
        slope = float((xc * (ys - ys.mean())).sum() / xc.square().sum())
        intercept = float(ys.mean() - slope * xs.mean())
        return float((ys - intercept - slope * xs).square().sum()), slope, intercept

    one, _, _ = rss(x, y)
    best = None
    for k in range(min_side, len(levels) - min_side + 1):
        left = x < levels[k]
        a, b = rss(x[left], y[left]), rss(x[~left], y[~left])
        if best is None or a[0] + b[0] < best[0]:
            best = (a[0] + b[0], k, a, b)
    two, k, a, b = best
    dof = len(x) - 4
    F = (one - two) / 2 / max(two / dof, 1e-300)
    p = float(stats.f.sf(F, 2, dof))
    at = float(levels[k])
    jump = math.exp((b[2] + b[1] * at) - (a[2] + a[1] * at))
    found = p < alpha and (abs(math.log(jump)) >= math.log(min_jump) or abs(b[1] - a[1]) >= min_slope_change)
    return {"break_n": round(math.exp(at)) if found else math.nan, "p": p, "slope_before": a[1],
            "slope_after": b[1], "jump": jump}


def growth_fits(table: pd.DataFrame | ResultTable, by: Sequence[str], *, x: str = "n", y: str = "lip",
                resamples: int = 500, interval: str = "bootstrap") -> pd.DataFrame:
    """Sec. 5: ``y ≈ C x^α`` per group of ``by``: least-squares log-log slope ``α``, its interval,
    ``C = e^intercept``, :func:`lack_of_fit`'s ``lof_F`` and ``lof_p`` where lengths repeat (``nan`` otherwise), and
    :func:`power_law_break`'s verdict where there are enough lengths; an empty table gives an empty one.

    The interval, where lengths repeat: ``"bootstrap"`` (:func:`bootstrap_slope`, ``resamples`` resamples within each
    length) or ``"means"`` (:func:`mean_curve_slope`, Student on the per-length means, which widens with the
    curve's lack of fit; ``α`` is then the slope through the means). Where every length has one input: Student
    (:func:`fit_line`) either way."""

    frame, by = check_grouped_table(table, by, (x, y), allow_empty=True)
    check_choice(interval, "interval", ("bootstrap", "means"))
    resamples = check_positive_int(resamples, "resamples")
    if not len(frame):
        return pd.DataFrame(columns=[*by, "alpha", "low", "high", "C", "lof_F", "lof_p"])
    rows = []
    for key, group in frame.groupby(list(by), sort=True):
        lx = torch.tensor(group[x].to_numpy(), dtype=torch.float64).log()
        ly = torch.tensor(group[y].to_numpy(), dtype=torch.float64).log()
        if group[x].nunique() == len(group):
            fit = fit_line(lx, ly)
            slope, low, high = fit.slope, fit.low, fit.high
            intercept = float(ly.mean() - slope * lx.mean())
        elif interval == "means":
            fit = mean_curve_slope(lx, ly)
            slope, low, high, intercept = fit.slope, fit.low, fit.high, fit.intercept
        else:
            slope, low, high = bootstrap_slope(lx, ly, resamples=resamples)
            intercept = float(ly.mean() - slope * lx.mean())
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        row.update(alpha=slope, low=low, high=high, C=math.exp(intercept),
                   lof_F=math.nan, lof_p=math.nan)
        if 3 <= group[x].nunique() < len(group):
            test = lack_of_fit(lx, ly)
            row.update(lof_F=test.F, lof_p=test.p)
        if group[x].nunique() >= 6:
            verdict = power_law_break(group[x], group[y])
            row.update(break_n=verdict["break_n"], p_break=verdict["p"], jump=verdict["jump"],
                       slope_before=verdict["slope_before"], slope_after=verdict["slope_after"])
        rows.append(row)
    return pd.DataFrame(rows)


# Fixed before the fits of SmolLM2's chapters: an exponent's interval must clear 1/2 by this much for a clear verdict
# (more than twice the largest exponent shift that Q4_1 rounding of the attention weights causes on MiniLM, which
# :func:`lipnb.experiments.rounding.q4_1_effect` measures and the chapters check).
EXPONENT_MARGIN = 0.05


def _placement(low: float, high: float, threshold: float, margin: float) -> tuple[str, bool]:
    """Where ``[low, high]`` lies against ``threshold``: ``"above"``, ``"below"`` or ``"contains"``, and whether
    it clears it by less than ``margin``; arguments checked (a NaN end is refused)."""
    low, high, threshold, margin = (check_real(v, name) for v, name in (
        (low, "low"), (high, "high"), (threshold, "threshold"), (margin, "margin")))
    if low > high or margin < 0:
        raise ValueError(f"side needs low <= high and margin >= 0; got [{low}, {high}], margin {margin}")
    if low > threshold:
        return "above", low - threshold < margin
    if high < threshold:
        return "below", threshold - high < margin
    return "contains", False


def side(low: float, high: float, threshold: float = 0.5, margin: float = EXPONENT_MARGIN) -> str:
    """Where an interval ``[low, high]`` lies with respect to ``threshold`` (Sec. 5's exponents against 1/2):
    ``"above"``, ``"below"`` (each with ``", within the margin"`` when it clears ``threshold`` by less than
    ``margin``, default :data:`EXPONENT_MARGIN`) or ``"contains it"``; a NaN end (an interval that could not be
    computed) is refused."""
    where, near = _placement(low, high, threshold, margin)
    return "contains it" if where == "contains" else where + (", within the margin" if near else "")


def side_phrase(low: float, high: float, threshold: float = 0.5, margin: float = EXPONENT_MARGIN,
                name: str = "1/2") -> str:
    """:func:`side` as a phrase that reads in a sentence, the threshold named: "above 1/2", "below 1/2 by less
    than the margin", "containing 1/2"."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError("side_phrase: name is the threshold written as text, e.g. '1/2'")
    where, near = _placement(low, high, threshold, margin)
    if where == "contains":
        return f"containing {name}"
    return f"{where} {name}" + (" by less than the margin" if near else "")
