"""The tightness search of chapter 32: differentiable Jacobian norms, the proof's starts, the fitted rates."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import exact_local_lipschitz
from lipnb.core.l2_bounds import exact_local_lipschitz_inf, phi_inverse, theorem_3_2_two, theorem_3_2_two_as_printed
from lipnb.core.l2_self_attention import L2AttentionMap, random_l2_heads
from lipnb.experiments.l2_tightness import (
    fitted_rates,
    identity_head,
    jacobian_norm,
    maximize_l2_lipschitz,
    proof_start,
    query_scaled,
)
from lipnb.results import ResultTable


def test_jacobian_norms_match_the_dense_ground_truth() -> None:
    heads = random_l2_heads(4, 2, seed=2, scale=2.0)
    X = 2 * torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    F = L2AttentionMap(heads)
    torch.testing.assert_close(jacobian_norm(heads, X, "2"), exact_local_lipschitz(F, X))
    torch.testing.assert_close(jacobian_norm(heads, X, "inf"), exact_local_lipschitz_inf(F, X))
    with pytest.raises(ValueError, match="norm"):
        jacobian_norm(heads, X, "1")  # type: ignore[arg-type]


def test_proof_start_puts_the_others_where_the_lambert_sum_peaks() -> None:
    heads = identity_head(3)
    N = 9
    X = proof_start(heads, 2, N)
    z = X[:, 1:].square().sum(-1) / heads.tau
    torch.testing.assert_close(z, torch.full_like(z, 1 + float(phi_inverse(N - 1))))
    assert bool((X[:, 0] == 0).all())


def test_ascent_never_returns_less_than_its_start() -> None:
    heads = identity_head(2)
    X0 = torch.randn(2, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    _, best = maximize_l2_lipschitz(heads, X0, "2", steps=10)
    assert bool((best >= jacobian_norm(heads, X0, "2") - 1e-12).all())


def test_fitted_rates_recover_a_planted_law() -> None:
    """Constants planted as ``3 φ⁻¹(N-1) + 1`` (∞) and ``N^{0.5}`` (2-norm) come back as slope 3 and exponent 0.5."""
    N = [2, 4, 8, 16, 32]
    lam = [float(phi_inverse(n - 1)) for n in N]
    cols: dict[str, list] = {"N": [], "norm": [], "start": [], "reached": [], "bound": [], "sharpened": []}
    for n, value in zip(N, lam, strict=True):
        for norm, reached in (("inf-norm", 3 * value + 1), ("2-norm", math.sqrt(n))):
            for key, v in zip(cols, (n, norm, "random", reached, 10.0 * n, 10.0 * n), strict=True):
                cols[key].append(v)
    rates = fitted_rates(ResultTable.from_columns(cols, {})).frame.set_index("norm")
    assert math.isclose(rates.loc["inf-norm", "lambert_slope"], 3, rel_tol=1e-9)
    assert math.isclose(rates.loc["2-norm", "power_exponent"], 0.5, rel_tol=1e-9)
    assert math.isclose(rates.loc["2-norm", "bound_exponent"], 1.0, rel_tol=1e-9)


def test_query_scaled_scales_as_the_chapter_says() -> None:
    """``query_scaled``: at ``s = 1`` the dense constant and both bounds of the unscaled head; with ``W^Q`` scaled
    by ``s`` on ``X / s``, the constant grows as ``s²``, the printed bound as ``s``, the corrected one as ``s²``."""
    heads = random_l2_heads(4, 1, seed=0)
    X = torch.randn(8, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    lip, printed, corrected = query_scaled(heads, X, 1.0)
    assert lip == pytest.approx(float(exact_local_lipschitz(L2AttentionMap(heads), X).max()), rel=1e-12)
    assert printed == pytest.approx(float(theorem_3_2_two_as_printed(heads, 4)), rel=1e-12)
    assert corrected == pytest.approx(float(theorem_3_2_two(heads, 4, sharpened=True)), rel=1e-12)
    lip3, printed3, corrected3 = query_scaled(heads, X, 3.0)
    assert (lip3 / lip, printed3 / printed, corrected3 / corrected) == pytest.approx((9.0, 3.0, 9.0), rel=1e-9)
