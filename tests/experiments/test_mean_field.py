"""The measurements of :mod:`lipnb.experiments.mean_field` against independent computations: weighted attention
written out from Definition C.4 and differentiated by autograd, ``W_2`` by brute force over permutations, and
the closed forms of Theorem 3.5 and Proposition 3.6."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lipnb import self_attention
from lipnb.core.inputs import lemma_c_7_input
from lipnb.experiments.mean_field import (
    light_atom_sweep,
    mean_field_bound_sweep,
    two_dirac_finite_n,
    two_dirac_sweep,
    wasserstein_ratios,
)

F64 = torch.float64


def weighted_attention(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Definition C.4 written out for one measure ``Y`` ``(K, d)``: scores ``<A y_k, y_j> + log w_j``."""
    P = torch.softmax(Y @ A.T @ Y.T + w.log(), dim=-1)
    return P @ Y @ V.T


def weighted_norm(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor, w: torch.Tensor) -> float:
    """``||W^{1/2} D f_w W^{-1/2}||_2`` from the autograd Jacobian of :func:`weighted_attention`."""
    K, d = Y.shape
    J = torch.autograd.functional.jacobian(lambda y: weighted_attention(y.view(K, d), A, V, w).flatten(),
                                           Y.flatten())
    root = w.sqrt().repeat_interleave(d)
    return torch.linalg.matrix_norm(root[:, None] * J / root, ord=2).item()


def dense_constant(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> float:
    """``Lip_X(f)`` of one sequence ``(n, d)`` from the autograd Jacobian (uniform weights)."""
    n = len(X)
    return weighted_norm(X, A, V, torch.full((n,), 1 / n, dtype=F64))


def brute_w2(X: torch.Tensor, Y: torch.Tensor) -> float:
    """``W_2`` between two uniform clouds of equally many points: the cheapest of all permutations."""
    return min(math.sqrt(sum((X[i] - Y[p[i]]).square().sum().item() for i in range(len(X))) / len(X))
               for p in itertools.permutations(range(len(X))))


def test_wasserstein_ratios_match_brute_force(gen: torch.Generator) -> None:
    A, V = torch.randn(2, 3, 3, generator=gen, dtype=F64)
    X = torch.randn(1, 4, 3, generator=gen, dtype=F64)
    D = torch.randn(2, 4, 3, generator=gen, dtype=F64)
    f = lambda Z: self_attention(Z, A, V)  # noqa: E731
    steps = [1.0, 0.1]
    ratios = wasserstein_ratios(f, X, D, steps)
    assert ratios.shape == (2, 2)
    for k in range(2):
        for j, t in enumerate(steps):
            moved = X + t * D[k]
            expected = brute_w2(f(moved)[0], f(X)[0]) / brute_w2(moved[0], X[0])
            assert ratios[k, j].item() == pytest.approx(expected, rel=1e-12)


def test_wasserstein_ratios_refuse_mismatched_directions() -> None:
    X = torch.zeros(1, 4, 3, dtype=F64)
    with pytest.raises(ValueError, match="directions"):
        wasserstein_ratios(lambda Z: Z, X, torch.zeros(2, 5, 3, dtype=F64), [0.1])
    with pytest.raises(ValueError, match="steps"):
        wasserstein_ratios(lambda Z: Z, X, torch.zeros(2, 4, 3, dtype=F64), [0.0])


def test_light_atom_tends_to_the_own_query_term() -> None:
    A = torch.tensor([[1.0, 3.0], [-3.0, 0.0]], dtype=F64)
    eye = torch.eye(2, dtype=F64)
    Y = torch.tensor([[[2.0, 2.0], [-1.0, -2.0]]], dtype=F64)
    w = torch.tensor([0.25, 0.75], dtype=F64)
    light = light_atom_sweep(Y, w, A, eye, eps=[1e-3, 1e-12], points=41)
    assert len(light.maximisers) >= 1 and light.lip.shape == (len(light.maximisers), 2)
    # the own-query term at a maximiser, from the derivative of Γ_μ written out (Definition 2.4)
    z = light.maximisers[0]
    gamma_mu = lambda x: torch.softmax(Y[0] @ (A @ x) + w.log(), 0) @ Y[0]  # noqa: E731
    derivative = torch.autograd.functional.jacobian(gamma_mu, z)
    assert torch.linalg.matrix_norm(derivative, ord=2).item() == pytest.approx(light.sup, rel=1e-10)
    # the three-atom measure's weighted norm, independently, and its limit as eps -> 0
    atoms = torch.cat([Y[0], z[None]])
    for j, eps in enumerate([1e-3, 1e-12]):
        weights = torch.cat([(1 - eps) * w, torch.tensor([eps], dtype=F64)])
        assert light.lip[0, j].item() == pytest.approx(weighted_norm(atoms, A, eye, weights), rel=1e-9)
    assert light.lip[0, -1].item() == pytest.approx(light.sup, rel=1e-5)
    assert light.counts[1e-12] <= light.counts[1e-6]


def test_mean_field_bound_sweep_is_exact_and_bounded(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                     head_3: tuple[torch.Tensor, torch.Tensor]) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A, V = head_3
    table = mean_field_bound_sweep(A, V, [0.5, 1.5], [2, 5], per_length=2)
    assert len(table) == 2 * 2 * 3
    a, v = torch.linalg.matrix_norm(A, ord=2), torch.linalg.matrix_norm(V, ord=2)
    for row in table.frame.itertuples():
        x = a.item() * row.R**2
        assert row.stated == pytest.approx(v.item() * (1 + 3 * x) * math.exp(2 * x), rel=1e-12)
        assert row.sharpened == pytest.approx(v.item() * ((1 + 2 * x) * math.exp(x) + x), rel=1e-12)
        assert row.lip <= row.sharpened
    adversarial = table.where(inputs="adversarial", n=5, R=1.5)
    X = lemma_c_7_input(A, 1.5, 5)[0]
    assert adversarial["lip"].item() == pytest.approx(dense_constant(X, A, V), rel=1e-10)
    again = mean_field_bound_sweep(A, V, [0.5, 1.5], [2, 5], per_length=2)
    assert again.frame.equals(table.frame)


def test_two_dirac_sweep_matches_the_weighted_norm(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A = torch.diag(torch.tensor([0.8, 0.1, -0.6], dtype=F64))
    table = two_dirac_sweep(A, [2.0, 20.0])
    assert sorted(set(table.frame.case)) == ["negative", "positive"]
    eye = torch.eye(3, dtype=F64)
    u = {"positive": torch.tensor([1.0, 0, 0], dtype=F64), "negative": torch.tensor([0, 0, 1.0], dtype=F64)}
    for row in table.frame.itertuples():
        g, R = row.gamma, row.R
        assert g == pytest.approx(0.1 if row.case == "positive" else 0.6, rel=1e-12)
        assert g * R**2 == pytest.approx(row.gR2, rel=1e-12)
        heavy = R * u[row.case] / 2 if row.case == "positive" else R * u[row.case]
        light = R * u[row.case] if row.case == "positive" else -R * u[row.case]
        p = math.exp(-2 * g * R**2)
        atoms = torch.stack([light, heavy])
        expected = weighted_norm(atoms, A, eye, torch.tensor([p, 1 - p], dtype=F64))
        assert row.lip == pytest.approx(expected, rel=1e-9)
        third = weighted_norm(atoms, A, eye, torch.tensor([p / 3, 1 - p / 3], dtype=F64))
        assert row.lip_third == pytest.approx(third, rel=1e-9)
        assert row.closed == pytest.approx((1 + g * R**2) * math.exp(g * R**2) / 2, rel=1e-12)
        assert row.rate == pytest.approx(g / 2 * R**2 * math.exp(g * R**2), rel=1e-12)
    far = table.where(gR2=20.0)
    assert torch.allclose(far["lip"], far["closed"], rtol=1e-8)


def test_two_dirac_finite_n_is_exact_above_the_bound(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A = torch.diag(torch.tensor([0.8, 0.1, -0.6], dtype=F64))
    table = two_dirac_finite_n(A, [9, 33, 2**30 + 1], estimate_up_to=33)
    g = 0.6
    for row in table.frame.itertuples():
        assert g * row.R**2 == pytest.approx(math.log(row.n - 1) / 2, rel=1e-12)
        closed = math.sqrt(row.n - 1) / 2 * (1 + math.log(row.n - 1) / 2)
        assert row.lower == pytest.approx(closed, rel=1e-10)
        assert row.exact > row.lower
    small = table.frame.iloc[0]
    X = lemma_c_7_input(A, small.R, 9)[0]
    assert small.exact == pytest.approx(dense_constant(X, A, torch.eye(3, dtype=F64)), rel=1e-10)
    assert small.estimate == pytest.approx(small.exact, rel=1e-6)
    assert math.isnan(table.frame.estimate.iloc[-1])
