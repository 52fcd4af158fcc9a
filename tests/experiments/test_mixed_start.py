"""The mixed start's price (:mod:`lipnb.experiments.mixed_start`): the closed-form tail of one coordinate against
sampling, its concavity (and its failure at N = 2, where the lemma does not apply), and the Lanczos misses at a
planted crossing: the shared start misses every time, the mixed one no more often than the bound allows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from lipnb.experiments import mixed_start


def test_coordinate_tail_matches_sampling() -> None:
    g = torch.randn(200_000, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = (g[:, 0] / g.norm(dim=1)).abs().numpy()
    for t in (0.05, 0.2, 0.5):
        assert abs(float(np.mean(x <= t)) - float(mixed_start.coordinate_tail(16, t))) < 4e-3
    assert float(mixed_start.coordinate_tail(16, 0.0)) == 0.0 and float(mixed_start.coordinate_tail(16, 2.0)) == 1.0


def test_tail_is_concave_from_three_coordinates_and_not_at_two() -> None:
    """F(a t) ≤ a F(t) holds on the grid for N ≥ 3; at N = 2 the density (the arcsine law) grows with |x|, F is
    convex near 1, and the ratio exceeds one: the check can fail."""
    assert bool((mixed_start.concavity_ratios((3, 4, 64)) <= 1 + 1e-12).all())
    assert float(mixed_start.concavity_ratios((2,))[0]) > 1.01


def test_factor() -> None:
    assert mixed_start.mixed_start_factor() == 1.5 and mixed_start.NOISE_WEIGHT == 2.0
    assert mixed_start.mixed_start_factor(0.5) == 3.0


def test_crossing_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    starts = 4096
    frame = mixed_start.crossing_failures(((3, 0.4),), (2.0,), n=4, d=8, starts=starts).frame
    by = {row.start: row for row in frame.itertuples()}
    assert set(by) == {"random", "mixed", "shared"}
    assert by["shared"].failures == starts                       # the second singular vector alone: always missed
    for kind in ("random", "mixed"):
        row = by[kind]
        sigma = math.sqrt(row.allowed * (1 - min(row.allowed, 1)) / starts)
        assert 0 < row.failures / starts <= row.allowed + 4 * sigma
    assert by["mixed"].allowed == pytest.approx(1.5 * by["mixed"].bound)


def test_subsample_gap_against_closed_form_and_shuffles() -> None:
    """The hypergeometric mean and standard deviation, written out, and the spread of the first-m count over random
    orders of the whole count's starts; a count at its expectation has gap zero."""
    M, K, m = 400, 30, 100
    gap = mixed_start.subsample_gap(12, m, K, M)
    p = m / M
    assert gap.expected == pytest.approx(K * p)
    assert gap.sd == pytest.approx(math.sqrt(K * p * (1 - p) * (M - K) / (M - 1)))
    assert gap.gap == pytest.approx((12 - K * p) / gap.sd)
    rng = np.random.default_rng(0)
    counts = [int(rng.permutation(np.arange(M) < K)[:m].sum()) for _ in range(20_000)]
    assert abs(np.mean(counts) - gap.expected) < 0.05
    assert abs(np.std(counts) - gap.sd) / gap.sd < 0.02
    assert mixed_start.subsample_gap(7, m, 28, M).gap == pytest.approx(0.0)  # 28 misses, a quarter drawn


@pytest.mark.parametrize(("args", "error"), [
    ((5, 100, 30, 100), ValueError),      # the subsample is the whole
    ((5, 100, 400, 400), ValueError),     # every start misses
    ((40, 100, 30, 400), ValueError),     # more misses than the whole holds
    ((0, 390, 30, 400), ValueError),      # 390 hits from 370
    ((5.0, 100, 30, 400), TypeError),
    ((-1, 100, 30, 400), ValueError),
])
def test_subsample_gap_refuses_counts_that_cannot_be(args: tuple, error: type) -> None:
    with pytest.raises(error):
        mixed_start.subsample_gap(*args)
