"""The sweeps of :mod:`lipnb.experiments.synthetic`: Lemma C.7 constants, the synthetic bound sweep (cached),
the large-radius error and the quadratic growth slopes."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_attention_problem

from lipnb import exact_local_lipschitz, self_attention
from lipnb.core.bounds import gamma, lemma_c_7, lemma_c_7_sharpened
from lipnb.core.inputs import lemma_c_7_input, random_head
from lipnb.core.jacobian import score_gaps
from lipnb.experiments.stats import fit_line
from lipnb.experiments.synthetic import (
    _large_radius_error,
    ball_grid,
    lemma_c_7_constants,
    quadratic_growth_slopes,
    synthetic_bound_sweep,
)

F64 = torch.float64


@pytest.mark.parametrize("case", ["positive", "negative"])
def test_lemma_c_7_constants_are_exact_and_above_both_lower_bounds(case: str) -> None:
    A = torch.diag(torch.tensor([0.9, 0.3, -0.5], dtype=F64))
    lam = 0.9 if case == "positive" else -0.5
    R, ns = 2.0, [2, 3, 7, 15]
    values = lemma_c_7_constants(A, R, ns, case=case)
    f = lambda Z: self_attention(Z, A, torch.eye(3, dtype=F64))  # noqa: E731
    exact = torch.cat([exact_local_lipschitz(f, lemma_c_7_input(A, R, n, case=case)) for n in ns])
    assert torch.allclose(values, exact, rtol=1e-10)
    sharp = lemma_c_7_sharpened(lam, R, torch.tensor(ns))
    assert bool((lemma_c_7(lam, R, torch.tensor(ns)) <= sharp).all())
    assert bool((sharp <= exact * (1 + 1e-12)).all())


def test_lemma_c_7_constants_for_huge_n_stay_above_the_bound() -> None:
    A = torch.diag(torch.tensor([0.5, -1.0], dtype=F64))
    ns = [10, 10**4, 10**8]
    values = lemma_c_7_constants(A, 1.5, ns)
    assert bool(torch.isfinite(values).all())
    assert bool((values >= lemma_c_7(-1.0, 1.5, torch.tensor(ns, dtype=F64))).all())


def test_synthetic_sweep_respects_both_bounds(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    d = 5
    R = math.sqrt(3 / gamma(random_head(d, 0)).item())
    result = synthetic_bound_sweep(d, 0, R, [2, 8, 32], 2)
    for family in ("random", "adversarial"):
        r = result.where(inputs=family)
        assert bool((r["lip"] <= r["data_bound"]).all() and (r["data_bound"] <= r["bound"]).all())
        assert bool((r["column_sum"] <= r["n"] + 1e-9).all())
    again = synthetic_bound_sweep(d, 0, R, [2, 8, 32], 2)
    assert again.where(inputs="random")["lip"].equal(result.where(inputs="random")["lip"])


@pytest.mark.parametrize("masked", [False, True])
def test_large_radius_error_decays_at_the_gap_rate(gen: torch.Generator, masked: bool) -> None:
    X, A, V = random_attention_problem(gen)
    X = torch.nn.functional.normalize(X[:1], dim=-1)
    gap = score_gaps(X, A, masked=masked).min().item()
    R = torch.sqrt(torch.tensor([15.0, 20.0, 25.0], dtype=F64) / gap)
    err = _large_radius_error(X, A, V, R, masked=masked)
    assert bool((err[1:] < err[:-1]).all())
    rate = -fit_line(R**2, (err / R**2).log()).slope
    assert abs(rate / gap - 1) < 0.05


def test_quadratic_growth_slopes_are_two(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    radii = torch.logspace(1, 3, 5, dtype=F64)
    table = quadratic_growth_slopes(5, 3, radii, 4, seed=1)
    constants, slopes = table.pivot("lip", "replicate", "radius"), table.pivot("slope", "replicate", "radius")[:, 0]
    assert constants.shape == (4, 5) and slopes.shape == (4,)
    torch.testing.assert_close(table.pivot("radius", "replicate", "radius")[0], radii)
    assert bool(((slopes - 2).abs() < 0.05).all())


def test_ball_grid_keeps_the_grid_in_float64(head_3: tuple[torch.Tensor, torch.Tensor]) -> None:
    A, V = (M.float() for M in head_3)
    grid = ball_grid(A, V, torch.tensor([0.5, 2.0]), (2, 5), 3)
    assert grid.A.dtype == grid.V.dtype == torch.float64 and torch.equal(grid.A, A.double())
    assert grid.params == {"A": A.double().tolist(), "V": V.double().tolist(), "radii": [0.5, 2.0],
                           "lengths": [2, 5], "per_length": 3}


@pytest.mark.parametrize(("A", "V", "radii", "lengths", "per_length", "error", "match"), [
    (torch.eye(3), torch.eye(2), [1.0], [2], 1, ValueError, "one width"),
    (torch.eye(3), torch.ones(3, 2), [1.0], [2], 1, ValueError, "square"),
    (torch.ones(3), torch.eye(3), [1.0], [2], 1, ValueError, "dimensions"),
    (torch.eye(3), torch.eye(3), "1.0", [2], 1, TypeError, "radii"),
    (torch.eye(3), torch.eye(3), [-1.0], [2], 1, ValueError, "radii"),
    (torch.eye(3), torch.eye(3), [], [2], 1, ValueError, "radii"),
    (torch.eye(3), torch.eye(3), [1.0], [1], 1, ValueError, "lengths"),
    (torch.eye(3), torch.eye(3), [1.0], [2], 0, ValueError, "per_length"),
])
def test_ball_grid_refuses_a_bad_grid_before_any_work(A: torch.Tensor, V: torch.Tensor, radii: object,
                                                      lengths: object, per_length: int, error: type,
                                                      match: str) -> None:
    with pytest.raises(error, match=match):
        ball_grid(A, V, radii, lengths, per_length)  # type: ignore[arg-type]
