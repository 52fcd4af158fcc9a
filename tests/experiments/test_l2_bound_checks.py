"""Theorem 3.2 against what inputs reach (lipnb.experiments.l2_bound_checks): each ratio recomputed from dense
float64 Jacobians and the bounds, the Lambert-W grid against a scalar optimiser, the scaling of the weights."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from scipy.optimize import minimize_scalar

from lipnb import exact_local_lipschitz
from lipnb.core import (
    L2AttentionMap,
    L2Heads,
    exact_local_lipschitz_inf,
    l2_attention,
    random_l2_heads,
    theorem_3_2_inf,
    theorem_3_2_two,
)
from lipnb.experiments.l2_bound_checks import (
    lambert_grid_maxima,
    optimised_input_ratios,
    random_input_ratios,
    scaled_heads,
)
from lipnb.experiments.l2_tightness import identity_head


def test_lambert_grid_maxima_against_a_scalar_optimiser() -> None:
    """At equal distances the sum is (N-1) z e^-z / (1 + (N-1) e^-z): its maximum found by scipy, not by the grid."""
    lengths = (2, 5, 40)
    expected = []
    for N in lengths:
        f = lambda z, m=N - 1: -m * z * math.exp(-z) / (1 + m * math.exp(-z))  # noqa: E731
        expected.append(-minimize_scalar(f, bounds=(0, 12), method="bounded", options={"xatol": 1e-12}).fun)
    torch.testing.assert_close(lambert_grid_maxima(lengths), torch.tensor(expected, dtype=torch.float64),
                               rtol=1e-7, atol=0)
    with pytest.raises(ValueError, match="at least 2"):
        lambert_grid_maxima((1,))


def test_random_input_ratios_from_dense_jacobians(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ratio: the largest dense 2-norm (SVD) or ∞-norm constant over the same inputs, over the bound."""
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    table = random_input_ratios(((2, 1), (4, 2)), (3,), (0.5, 2.0), batch=4, seed=7).frame
    g = torch.Generator().manual_seed(7)
    rows = table.to_dict("records")
    k = 0
    for D, H in ((2, 1), (4, 2)):
        heads = random_l2_heads(D, H, seed=D + H, scale=2.0)
        F = L2AttentionMap(heads)
        for radius in (0.5, 2.0):
            X = radius * torch.randn(4, 3, D, dtype=torch.float64, generator=g)
            two, inf = exact_local_lipschitz(F, X).max(), exact_local_lipschitz_inf(F, X).max()
            row = rows[k]
            assert (row["D"], row["H"], row["N"], row["radius"]) == (D, H, 3, radius)
            assert row["two"] == pytest.approx(float(two / theorem_3_2_two(heads, 3)), rel=1e-8)
            assert row["two_sharpened"] == pytest.approx(float(two / theorem_3_2_two(heads, 3, sharpened=True)),
                                                         rel=1e-8)
            assert row["inf"] == pytest.approx(float(inf / theorem_3_2_inf(heads, 3)), rel=1e-12)
            k += 1


def test_scaled_heads_scale_the_map() -> None:
    """F with W^Q, W^V, W^O scaled by q, t, u, at X / q, is q t u F(X): its constant q² t u times F's."""
    heads = random_l2_heads(4, 2, seed=3)
    X = torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scaled = scaled_heads(heads, 3.0, 2.0, 1.5)
    torch.testing.assert_close(l2_attention(X / 3, scaled), 9.0 * l2_attention(X, heads))
    torch.testing.assert_close(exact_local_lipschitz(L2AttentionMap(scaled), X / 3),
                               27.0 * exact_local_lipschitz(L2AttentionMap(heads), X))
    plain = scaled_heads(identity_head(2), 2.0, 1.0, 1.0)  # no output matrix: the identity
    assert torch.equal(plain.W, torch.eye(2, dtype=torch.float64))


def test_optimised_input_ratios_are_below_the_bounds_and_scale_free() -> None:
    pairs = torch.eye(4, dtype=torch.float64).view(4, 2, 2).transpose(0, 1)
    table = optimised_input_ratios(L2Heads(Q=pairs, V=pairs), (4,), restarts=2, steps=20).frame
    assert table["norm"].tolist() == ["2", "inf"]
    assert bool(((table.ratio > 0) & (table.ratio <= 1)).all())
    torch.testing.assert_close(torch.tensor(table.scaled_ratio.to_numpy()), torch.tensor(table.ratio.to_numpy()),
                               rtol=1e-6, atol=0)
