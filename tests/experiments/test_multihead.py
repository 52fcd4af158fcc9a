"""The measurements of :mod:`lipnb.experiments.multihead` against independent computations: a multi-head layer
with biases written out from App. E.3 (key bias included) and differentiated by autograd, and the closed form of
Theorem E.3."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import MultiHead
from lipnb.experiments.multihead import (
    bias_ascent_sweep,
    lemma_3_8_ladder,
    lemma_e_2_jvp,
    theorem_e_3_per_head,
    without_biases,
)

F64 = torch.float64


def written_out(X: torch.Tensor, Q, K, V, W, b_Q, b_K, b_V) -> torch.Tensor:
    """App. E.3 as written, one sequence ``(n, d)``: ``Σ_h W_h softmax((Q x + b_Q)·(K x + b_K)/√k) (V x + b_V)``."""
    out = 0
    for h in range(len(Q)):
        q, key, v = X @ Q[h].T + b_Q[h], X @ K[h].T + b_K[h], X @ V[h].T + b_V[h]
        out = out + torch.softmax(q @ key.T / math.sqrt(Q.shape[1]), -1) @ v @ W[h].T
    return out


@pytest.fixture
def layer(gen: torch.Generator) -> tuple[MultiHead, tuple[torch.Tensor, ...]]:
    H, k, d = 3, 2, 4
    Q, K, V = torch.randn(3, H, k, d, generator=gen, dtype=F64)
    W = torch.randn(H, d, k, generator=gen, dtype=F64)
    b_Q, b_K, b_V = torch.randn(3, H, k, generator=gen, dtype=F64)
    heads = MultiHead.from_projections(Q, K, V, W, q_bias=b_Q, v_bias=b_V)
    return heads, (Q, K, V, W, b_Q, b_K, b_V)


def test_lemma_e_2_jvp_is_the_derivative_of_the_written_layer(layer, gen: torch.Generator) -> None:
    heads, params = layer
    X = torch.randn(2, 5, 4, generator=gen, dtype=F64)
    E = torch.randn(2, 5, 4, generator=gen, dtype=F64)
    closed = lemma_e_2_jvp(X, heads, E)
    for b in range(2):
        _, expected = torch.autograd.functional.jvp(lambda Z: written_out(Z, *params), X[b], E[b])
        assert torch.allclose(closed[b], expected, rtol=1e-10, atol=1e-12)


def test_the_ladder_is_exact_and_ordered(layer, gen: torch.Generator) -> None:
    heads, params = layer
    X = 2 * torch.randn(3, 5, 4, generator=gen, dtype=F64)
    exact = lemma_3_8_ladder(heads, X, exact=True, unit=True)
    estimated = lemma_3_8_ladder(heads, X)
    for b in range(3):
        J = torch.autograd.functional.jacobian(lambda Z: written_out(Z.view(5, 4), *params).flatten(), X[b].flatten())
        assert exact["measured"][b].item() == pytest.approx(torch.linalg.matrix_norm(J, ord=2).item(), rel=1e-10)
    assert torch.allclose(estimated["measured"], exact["measured"], rtol=1e-5)
    assert torch.allclose(estimated["heads"], exact["heads"], rtol=1e-5)
    assert bool(estimated["converged"].all())
    W_norms = torch.linalg.matrix_norm(heads.W, ord=2)
    assert bool((exact["measured"] <= exact["projected"].sum(0) * (1 + 1e-12)).all())
    assert bool((exact["projected"] <= W_norms[:, None] * exact["heads"] * (1 + 1e-12)).all())
    assert "unit" not in estimated and exact["unit"].shape == exact["heads"].shape


def test_theorem_e_3_per_head_closed_form(layer) -> None:
    heads, _ = layer
    R, n = 1.5, 7
    bound = theorem_e_3_per_head(heads, R, n)
    sharp = theorem_e_3_per_head(heads, R, n, sharpened=True)
    plain = theorem_e_3_per_head(without_biases(heads), R, n)
    for h in range(heads.num_heads):
        a = torch.linalg.matrix_norm(heads.A[h], ord=2).item()
        v = torch.linalg.matrix_norm(heads.V[h], ord=2).item()
        c = heads.score_bias[h].norm().item()
        expected = math.sqrt(3) * v * math.sqrt(a**2 * R**4 + 4 * n * R**2 * (a * R + c) ** 2 + n)
        assert bound[h].item() == pytest.approx(expected, rel=1e-12)
        assert sharp[h].item() == pytest.approx(
            math.sqrt(3) * v * math.sqrt(a**2 * R**4 + n * R**2 * (a * R + c) ** 2 + n), rel=1e-12)
        assert plain[h].item() == pytest.approx(math.sqrt(3) * v * math.sqrt(a**2 * R**4 * (4 * n + 1) + n), rel=1e-12)


def test_bias_ascent_stays_below_the_sharpened_bound(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    table = bias_ascent_sweep([0.5, 2.0], n=3, d=2, starts=2, steps=10, seed=3)
    assert len(table) == 2
    assert bool((table["best"] <= table["data_bound"] * (1 + 1e-9)).all())
    assert bool((table["data_bound"] <= table["sharpened"]).all())
    assert bool((table["sharpened"] <= table["stated"]).all())
    assert bias_ascent_sweep([0.5, 2.0], n=3, d=2, starts=2, steps=10, seed=3).frame.equals(table.frame)
