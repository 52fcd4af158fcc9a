"""Tests of the helpers behind chapters 3 (the √n bound, Theorems 3.3 and C.3) and 4 (tightness, Lemma C.7)."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import MultiHead, exact_local_lipschitz, jacobian_matrix, self_attention
from lipnb.bounds import (
    gamma,
    lemma_c_7,
    lemma_c_7_sharpened,
    multihead_data_bound,
    theorem_3_3,
    theorem_c_3,
    theorem_c_3_terms,
)
from lipnb.inputs import adversarial_case, ball_tokens, head_spectra, lemma_c_7_input
from lipnb.jacobian import lemma_c2_term_matrices
from lipnb.stats import bootstrap_slope
from lipnb.sweeps import lemma_c_7_constants

f64 = torch.float64


def _head(gen: torch.Generator, d: int) -> torch.Tensor:
    return torch.randn(d, d, generator=gen, dtype=f64) / math.sqrt(d)


@pytest.mark.parametrize("masked", [False, True])
def test_lemma_c2_terms_sum_to_the_jacobian(gen: torch.Generator, masked: bool) -> None:
    X, A = 1.5 * torch.randn(2, 5, 3, generator=gen, dtype=f64), _head(gen, 3)
    terms = lemma_c2_term_matrices(X, A, masked=masked)
    J = jacobian_matrix(lambda Z: self_attention(Z, A, torch.eye(3, dtype=f64), masked=masked), X)
    assert torch.allclose(terms.sum(1), J, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_theorem_c_3_terms_bound_each_term_and_sum_to_the_library(gen: torch.Generator, masked: bool) -> None:
    d, R = 4, 2.0
    X, A = ball_tokens(3, 6, d, R, seed=1), _head(gen, d)
    V = torch.randn(2, d, generator=gen, dtype=f64)
    c = torch.randn(d, generator=gen, dtype=f64)
    bounds = theorem_c_3_terms(X, A, masked=masked)
    assert torch.allclose(bounds, theorem_c_3_terms(X, A, masked=masked), rtol=1e-9)
    exact = torch.linalg.matrix_norm(lemma_c2_term_matrices(X, A, masked=masked), ord=2)
    assert bool((exact <= bounds * (1 + 1e-12)).all())
    assert torch.allclose(torch.linalg.matrix_norm(V, ord=2) * bounds.sum(1), theorem_c_3(X, A, V, masked=masked))
    with_bias = theorem_c_3_terms(X, A, score_bias=c, masked=masked).sum(1)
    assert torch.allclose(with_bias, theorem_c_3(X, A, torch.eye(d, dtype=f64), score_bias=c, masked=masked))
    f = lambda Z: self_attention(Z, A, V, masked=masked)  # noqa: E731
    assert bool((exact_local_lipschitz(f, X) <= theorem_c_3(X, A, V, masked=masked)).all())
    assert bool((theorem_c_3(X, A, V, masked=masked) <= theorem_3_3(A, V, R, 6)).all())


@pytest.mark.parametrize(("n", "masked"), [(4, False), (4, True), (9, False)])
def test_fast_data_bound_equals_the_library(gen: torch.Generator, n: int, masked: bool) -> None:
    H, k, d = 2, 3, 7
    heads = MultiHead.from_projections(*(torch.randn(3, H, k, d, generator=gen, dtype=f64)),
                                       torch.randn(H, 5, k, generator=gen, dtype=f64),
                                       q_bias=torch.randn(H, k, generator=gen, dtype=f64))
    X = ball_tokens(2, n, d, 1.5, seed=2)
    fast = multihead_data_bound(X, heads, masked=masked)
    assert torch.allclose(fast, multihead_data_bound(X, heads, masked=masked), rtol=1e-9)


def test_ball_tokens_lie_in_the_ball() -> None:
    X = ball_tokens(4, 50, 3, 2.5, seed=3)
    assert X.shape == (4, 50, 3) and bool((X.norm(dim=-1) <= 2.5).all())
    assert X.norm(dim=-1).max() > 2.0


@pytest.mark.parametrize("rank", [2, 5])
def test_head_spectra_match_the_dense_eigenvalues(gen: torch.Generator, rank: int) -> None:
    d = 5
    A = torch.stack([torch.randn(d, rank, generator=gen, dtype=f64) @ torch.randn(rank, d, generator=gen, dtype=f64)
                     for _ in range(6)])
    spectra = head_spectra(A)
    for h in range(len(A)):
        assert torch.allclose(spectra.gamma[h], gamma(A[h]), atol=1e-9)
        assert bool(spectra.positive[h]) == (adversarial_case(A[h]) == "positive")


@pytest.mark.parametrize("case", ["positive", "negative"])
def test_lemma_c_7_constants_are_exact_and_above_both_lower_bounds(case: str) -> None:
    A = torch.diag(torch.tensor([0.9, 0.3, -0.5], dtype=f64))
    lam = 0.9 if case == "positive" else -0.5
    R, ns = 2.0, [2, 3, 7, 15]
    values = lemma_c_7_constants(A, R, ns, case=case)
    f = lambda Z: self_attention(Z, A, torch.eye(3, dtype=f64))  # noqa: E731
    exact = torch.cat([exact_local_lipschitz(f, lemma_c_7_input(A, R, n, case=case)) for n in ns])
    assert torch.allclose(values, exact, rtol=1e-10)
    sharp = lemma_c_7_sharpened(lam, R, torch.tensor(ns))
    assert bool((lemma_c_7(lam, R, torch.tensor(ns)) <= sharp).all())
    assert bool((sharp <= exact * (1 + 1e-12)).all())


def test_bootstrap_slope_recovers_a_line_and_covers_a_noisy_one() -> None:
    x = torch.log(torch.tensor([8.0, 16, 32, 64]).repeat_interleave(3))
    slope, low, high = bootstrap_slope(x, 0.5 * x + 1.0)
    assert abs(slope - 0.5) < 1e-12 and abs(low - 0.5) < 1e-12 and abs(high - 0.5) < 1e-12
    noise = 0.05 * torch.randn(len(x), generator=torch.Generator().manual_seed(0), dtype=f64)
    slope, low, high = bootstrap_slope(x, 0.25 * x + noise)
    assert low < 0.25 < high and low < slope < high


def test_float32_low_rank_heads_keep_an_upper_bound(gen: torch.Generator) -> None:
    """A float32 ``A = KᵀQ/√k`` has rounding noise outside rank k: the fast bound must still cover the library's."""
    H, k, d, n = 2, 3, 24, 6
    heads = MultiHead.from_projections(*(torch.randn(3, H, k, d, generator=gen)), torch.randn(H, 5, k, generator=gen))
    X = ball_tokens(2, n, d, 2.0, seed=4)
    fast = multihead_data_bound(X, heads)
    exact = multihead_data_bound(X, heads.to(f64))
    assert bool((fast >= exact * (1 - 1e-9)).all()) and torch.allclose(fast, exact, rtol=1e-4)


def test_lemma_c_7_constants_for_huge_n_stay_above_the_bound() -> None:
    A = torch.diag(torch.tensor([0.5, -1.0], dtype=f64))
    ns = [10, 10**4, 10**8]
    values = lemma_c_7_constants(A, 1.5, ns)
    assert bool(torch.isfinite(values).all())
    assert bool((values >= lemma_c_7(-1.0, 1.5, torch.tensor(ns, dtype=f64))).all())


def test_synthetic_sweep_respects_both_bounds(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lipnb.inputs import random_head
    from lipnb.sweeps import synthetic_bound_sweep

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


def test_real_sweeps_on_a_tiny_grid(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from lipnb import data
    from lipnb.sweeps import head_gamma_table, real_adversarial_sweep, real_lipschitz_sweep

    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    folder = next((Path(p) for p in (data.data_dir(), shared) if (Path(p) / data.FILES["alice"].path).is_file()), None)
    if folder is None:
        pytest.skip("no pre-seeded Alice text")
    monkeypatch.setenv(data.DATA_ENV, str(folder))
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    real = real_lipschitz_sweep("minilm", 1, [4, 8], 1)
    assert real["n"].tolist() == [4.0, 8.0]
    assert bool((real["lip"] <= real["data_bound"]).all() and (real["data_bound"] <= real["bound"]).all())
    assert bool((real["mean_radius"] <= real["radius"]).all())
    table = head_gamma_table("minilm", [8], 1)
    gammas = table.pivot("gamma", "layer", "head")
    assert gammas.shape == (6, 12) and bool((gammas > 0).all())
    radius = table.pivot("radius", "layer", "head")[:, 0]
    adv = real_adversarial_sweep("minilm", 1, 0, radius[1].item(), [4, 8])
    assert adv["lip"].shape == (2,) and bool((adv["lip"] > 0).all())
