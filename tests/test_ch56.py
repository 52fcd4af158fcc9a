"""Tests of the helpers behind chapters 5 (large radius) and 6 (mean field): Theorem 3.7, App. C.3-C.7."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import exact_local_lipschitz, self_attention, weighted_operator_norm
from lipnb.bounds import theorem_3_5, theorem_3_5_sharpened, theorem_3_7_limit, two_dirac_constant
from lipnb.inputs import argmax_configuration, proposition_3_6_measure, repeat_tokens
from lipnb.jacobian import attention_covariances, score_gaps, selection_jacobian
from lipnb.measures import (
    own_query_norms,
    repeated_token_lipschitz,
    synchronous_lipschitz,
    wasserstein2_empirical,
    weighted_attention_lipschitz,
)
from lipnb.stats import fit_line, student_interval
from lipnb.sweeps import large_radius_error, quadratic_growth_slopes

f64 = torch.float64


def _problem(gen: torch.Generator, n: int = 5, d: int = 3, d_v: int = 2) -> tuple[torch.Tensor, ...]:
    X = torch.randn(2, n, d, generator=gen, dtype=f64)
    A = torch.randn(d, d, generator=gen, dtype=f64) / math.sqrt(d)
    V = torch.randn(d_v, d, generator=gen, dtype=f64) / math.sqrt(d)
    return X, A, V


def test_score_gaps_and_selection(gen: torch.Generator) -> None:
    X, A, V = _problem(gen)
    scores = (X @ A.mT) @ X.mT
    top = scores.sort(-1, descending=True).values
    assert torch.allclose(score_gaps(X, A), top[..., 0] - top[..., 1])
    masked = score_gaps(X, A, masked=True)
    assert bool(torch.isinf(masked[:, 0]).all()) and bool(torch.isfinite(masked[:, 1:]).all())
    S = selection_jacobian(X, A, V)
    E = torch.randn(X.shape, generator=gen, dtype=f64)
    m = scores.argmax(-1)
    expected = torch.stack([E[b, m[b]] @ V.mT for b in range(2)])
    assert torch.allclose((S @ E.flatten(1).unsqueeze(-1)).view(2, 5, -1), expected)
    assert torch.allclose(torch.linalg.matrix_norm(S, ord=2), theorem_3_7_limit(X, A, V))
    Sm = selection_jacobian(X, A, V, masked=True)
    assert torch.allclose(torch.linalg.matrix_norm(Sm, ord=2), theorem_3_7_limit(X, A, V, masked=True))


@pytest.mark.parametrize("masked", [False, True])
def test_large_radius_error_decays_at_the_gap_rate(gen: torch.Generator, masked: bool) -> None:
    X, A, V = _problem(gen)
    X = torch.nn.functional.normalize(X[:1], dim=-1)
    gap = score_gaps(X, A, masked=masked).min().item()
    R = torch.sqrt(torch.tensor([15.0, 20.0, 25.0], dtype=f64) / gap)
    err = large_radius_error(X, A, V, R, masked=masked)
    assert bool((err[1:] < err[:-1]).all())
    rate = -fit_line(R**2, (err / R**2).log()).slope
    assert abs(rate / gap - 1) < 0.05


def test_limit_norm_at_argmax_configuration(gen: torch.Generator) -> None:
    d, n = 3, 6
    A = torch.randn(d, d, generator=gen, dtype=f64)
    A = A + A.T
    V = torch.randn(d, d, generator=gen, dtype=f64)
    X = argmax_configuration(A, 1.0, n)
    limit = theorem_3_7_limit(X, A, V)
    assert torch.allclose(limit, torch.linalg.matrix_norm(V, ord=2) * math.sqrt(n))
    gap = score_gaps(X, A).min().item()
    R = math.sqrt(40 / gap)
    lip = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), R * X)
    assert torch.allclose(lip, limit, rtol=1e-9)


def test_fit_line_and_student_interval() -> None:
    x = torch.linspace(0, 1, 11, dtype=f64)
    fit = fit_line(x, 3 * x + 1 + 1e-3 * torch.sin(37 * x))
    assert abs(fit.slope - 3) < 1e-2 and fit.low < fit.slope < fit.high
    mean, low, high = student_interval(torch.tensor([1.0, 2.0, 3.0]))
    assert mean == 2.0 and low < 2.0 < high


def test_quadratic_growth_slopes_are_two() -> None:
    radii = torch.logspace(1, 3, 5, dtype=f64)
    constants, slopes = quadratic_growth_slopes(5, 3, radii, 4, seed=1)
    assert constants.shape == (4, 5) and slopes.shape == (4,)
    assert bool(((slopes - 2).abs() < 0.05).all())


def test_repeat_tokens(gen: torch.Generator) -> None:
    Y = torch.randn(1, 3, 2, generator=gen, dtype=f64)
    X = repeat_tokens(Y, torch.tensor([1, 2, 3]))
    assert X.shape == (1, 6, 2) and torch.equal(X[0, 3], Y[0, 2])
    with pytest.raises(ValueError):
        repeat_tokens(Y, torch.tensor([1, 0, 3]))


def test_own_query_norm_is_the_derivative_of_gamma(gen: torch.Generator) -> None:
    Y, A, V = _problem(gen, n=4)
    Y = Y[:1]
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=f64)
    z = torch.randn(1, 1, 3, generator=gen, dtype=f64)

    def gamma(q: torch.Tensor) -> torch.Tensor:
        P = torch.softmax((q @ A.mT) @ Y[0].T + w.log(), -1)
        return P @ Y[0] @ V.T

    D = torch.autograd.functional.jacobian(gamma, z[0, 0])
    cov = attention_covariances(Y, A, weights=w, queries=z)
    assert torch.allclose(V @ cov[0, 0] @ A, D, atol=1e-12)
    assert torch.allclose(own_query_norms(Y, A, V, weights=w, queries=z)[0, 0], torch.linalg.matrix_norm(D, ord=2))


def test_weighted_and_synchronous_norms_agree(gen: torch.Generator) -> None:
    Y, A, V = _problem(gen, n=3)
    counts = torch.tensor([1, 2, 4])
    w = counts.double() / counts.sum()
    fw = lambda Z: self_attention(Z, A, V, weights=w)  # noqa: E731
    ref = weighted_operator_norm(fw, Y, w)
    assert torch.allclose(weighted_attention_lipschitz(Y, A, V, w), ref, rtol=1e-12)
    sync = synchronous_lipschitz(lambda Z: self_attention(Z, A, V), Y, counts)
    assert torch.allclose(sync, ref, rtol=1e-10)


def test_repeated_token_identity_including_split_dominated_case(gen: torch.Generator) -> None:
    Y, A, V = _problem(gen, n=3)
    counts = torch.tensor([1, 2, 4])
    X = repeat_tokens(Y, counts)
    exact = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)
    assert torch.allclose(repeated_token_lipschitz(Y, A, V, counts), exact, rtol=1e-10)
    # A case where the copies of the first token moving apart beat every rigid motion.
    A2 = torch.tensor([[1.0, 3.0], [-3.0, 0.0]], dtype=f64)
    I2 = torch.eye(2, dtype=f64)
    Y2 = torch.tensor([[[2.0, 2.0], [-1.0, -2.0]]], dtype=f64)
    counts2 = torch.tensor([2, 6])
    w2 = counts2.double() / 8
    exact2 = exact_local_lipschitz(lambda Z: self_attention(Z, A2, I2), repeat_tokens(Y2, counts2))
    rigid2 = weighted_attention_lipschitz(Y2, A2, I2, w2)
    assert exact2.item() > 1.5 * rigid2.item()
    assert torch.allclose(exact2, own_query_norms(Y2, A2, I2, weights=w2)[:, 0], rtol=1e-10)
    assert torch.allclose(repeated_token_lipschitz(Y2, A2, I2, counts2), exact2, rtol=1e-10)


def test_wasserstein2_empirical(gen: torch.Generator) -> None:
    X = torch.randn(6, 2, generator=gen, dtype=f64)
    assert wasserstein2_empirical(X, X[torch.randperm(6, generator=gen)]) == 0.0
    E = 1e-4 * torch.randn(6, 2, generator=gen, dtype=f64)
    assert math.isclose(wasserstein2_empirical(X, X + E), (E.norm() / math.sqrt(6)).item(), rel_tol=1e-12)
    a = torch.tensor([[0.0], [1.0]], dtype=f64)
    assert math.isclose(wasserstein2_empirical(a, torch.tensor([[1.0], [0.0]], dtype=f64)), 0.0)
    assert math.isclose(wasserstein2_empirical(a, a + 2), 2.0)
    with pytest.raises(ValueError):
        wasserstein2_empirical(a, torch.zeros(3, 1, dtype=f64))


@pytest.mark.parametrize("case", ["positive", "negative"])
def test_two_dirac_constant_and_sharpened_bound(case: str) -> None:
    A = torch.diag(torch.tensor([1.0, -0.5, 0.2], dtype=f64))
    V = torch.eye(3, dtype=f64)
    g = 1.0 / 8 if case == "positive" else 0.5
    R = torch.sqrt(torch.tensor([10.0, 30.0, 100.0], dtype=f64) / g)
    X, w = proposition_3_6_measure(A, R, case=case)
    lip = weighted_attention_lipschitz(X, A, V, w)
    assert torch.allclose(lip, two_dirac_constant(g, R), rtol=1e-6)
    assert bool((lip <= theorem_3_5_sharpened(A, V, R)).all())
    assert bool((theorem_3_5_sharpened(A, V, R) <= theorem_3_5(A, V, R)).all())
