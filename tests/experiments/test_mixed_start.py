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
