"""The mean-field measures of :mod:`lipnb.core.measures` (App. C.3-C.7, Def. 2.6, Def. 4.1): own-query norms,
weighted and repeated-token constants, empirical and conditional Wasserstein distances, masked mean field."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from conftest import random_attention_params, random_attention_problem
from hypothesis import given
from hypothesis import strategies as st

from lipnb import exact_local_lipschitz, self_attention, weighted_operator_norm
from lipnb.core.inputs import repeat_tokens
from lipnb.core.jacobian import attention_covariances
from lipnb.core.measures import (
    conditional_w2,
    masked_mean_field,
    masked_mean_field_ratio,
    own_query_norms,
    repeated_token_lipschitz,
    synchronous_lipschitz,
    wasserstein2_empirical,
    weighted_attention_lipschitz,
)

F64 = torch.float64


# ----------------------------------------------------------------- weighted measures and repeated tokens (App. C.3-C.7)


def test_own_query_norm_is_the_derivative_of_gamma(gen: torch.Generator) -> None:
    Y, A, V = random_attention_problem(gen, n=4)
    Y = Y[:1]
    w = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=F64)
    z = torch.randn(1, 1, 3, generator=gen, dtype=F64)

    def gamma(q: torch.Tensor) -> torch.Tensor:
        P = torch.softmax((q @ A.mT) @ Y[0].T + w.log(), -1)
        return P @ Y[0] @ V.T

    D = torch.autograd.functional.jacobian(gamma, z[0, 0])
    cov = attention_covariances(Y, A, weights=w, queries=z)
    assert torch.allclose(V @ cov[0, 0] @ A, D, atol=1e-12)
    assert torch.allclose(own_query_norms(Y, A, V, weights=w, queries=z)[0, 0], torch.linalg.matrix_norm(D, ord=2))


def test_weighted_and_synchronous_norms_agree(gen: torch.Generator) -> None:
    Y, A, V = random_attention_problem(gen, n=3)
    counts = torch.tensor([1, 2, 4])
    w = counts.double() / counts.sum()
    fw = lambda Z: self_attention(Z, A, V, weights=w)  # noqa: E731
    ref = weighted_operator_norm(fw, Y, w)
    assert torch.allclose(weighted_attention_lipschitz(Y, A, V, w), ref, rtol=1e-12)
    sync = synchronous_lipschitz(lambda Z: self_attention(Z, A, V), Y, counts)
    assert torch.allclose(sync, ref, rtol=1e-10)


def test_repeated_token_identity_including_split_dominated_case(gen: torch.Generator) -> None:
    Y, A, V = random_attention_problem(gen, n=3)
    counts = torch.tensor([1, 2, 4])
    X = repeat_tokens(Y, counts)
    exact = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)
    assert torch.allclose(repeated_token_lipschitz(Y, A, V, counts), exact, rtol=1e-10)
    # A case where the copies of the first token moving apart beat every rigid motion.
    A2 = torch.tensor([[1.0, 3.0], [-3.0, 0.0]], dtype=F64)
    I2 = torch.eye(2, dtype=F64)
    Y2 = torch.tensor([[[2.0, 2.0], [-1.0, -2.0]]], dtype=F64)
    counts2 = torch.tensor([2, 6])
    w2 = counts2.double() / 8
    exact2 = exact_local_lipschitz(lambda Z: self_attention(Z, A2, I2), repeat_tokens(Y2, counts2))
    rigid2 = weighted_attention_lipschitz(Y2, A2, I2, w2)
    assert exact2.item() > 1.5 * rigid2.item()
    assert torch.allclose(exact2, own_query_norms(Y2, A2, I2, weights=w2)[:, 0], rtol=1e-10)
    assert torch.allclose(repeated_token_lipschitz(Y2, A2, I2, counts2), exact2, rtol=1e-10)


def test_wasserstein2_empirical(gen: torch.Generator) -> None:
    X = torch.randn(6, 2, generator=gen, dtype=F64)
    assert wasserstein2_empirical(X, X[torch.randperm(6, generator=gen)]) == 0.0
    E = 1e-4 * torch.randn(6, 2, generator=gen, dtype=F64)
    assert math.isclose(wasserstein2_empirical(X, X + E), (E.norm() / math.sqrt(6)).item(), rel_tol=1e-12)
    a = torch.tensor([[0.0], [1.0]], dtype=F64)
    assert math.isclose(wasserstein2_empirical(a, torch.tensor([[1.0], [0.0]], dtype=F64)), 0.0)
    assert math.isclose(wasserstein2_empirical(a, a + 2), 2.0)
    with pytest.raises(ValueError):
        wasserstein2_empirical(a, torch.zeros(3, 1, dtype=F64))


# --------------------------------------------------------------------------- Def 2.6: masked mean-field attention


def test_masked_mean_field_reduces_to_definitions_2_5_and_2_1(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen, d_v=2)
    X = torch.randn(3, 6, 3, generator=gen, dtype=F64)
    assert torch.allclose(masked_mean_field(X, torch.arange(6), A, V), self_attention(X, A, V, masked=True),
                          rtol=0, atol=1e-14)
    assert torch.allclose(masked_mean_field(X, torch.zeros(6), A, V), self_attention(X, A, V), rtol=0, atol=1e-14)


def test_masked_mean_field_is_block_causal_and_order_free(gen: torch.Generator) -> None:
    """Atoms see every atom at an earlier or equal position; the order of the atoms is irrelevant."""
    A, V = random_attention_params(gen)
    pos = torch.tensor([0, 0, 1, 1, 1, 2])
    X = torch.randn(1, 6, 3, generator=gen, dtype=F64)
    out = masked_mean_field(X, pos, A, V)
    # the two atoms at position 0 form an unmasked pair
    assert torch.allclose(out[:, :2], self_attention(X[:, :2], A, V), atol=1e-14)
    # the atoms at positions 0 and 1 do not depend on the atom at position 2
    Y = X.clone()
    Y[:, 5] += 1.0
    assert torch.equal(masked_mean_field(Y, pos, A, V)[:, :5], out[:, :5])
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    assert torch.allclose(masked_mean_field(X[:, perm], pos[perm], A, V), out[:, perm], atol=1e-14)


def test_masked_mean_field_weights_equal_repeated_atoms(gen: torch.Generator) -> None:
    """Def C.4 inside Def 2.6: an atom of mass 2/N is two coincident atoms of mass 1/N."""
    A, V = random_attention_params(gen)
    X = torch.randn(1, 3, 3, generator=gen, dtype=F64)
    pos = torch.tensor([0, 1, 1])
    weighted = masked_mean_field(X, pos, A, V, weights=torch.tensor([2.0, 1.0, 1.0], dtype=F64))
    repeated = masked_mean_field(X[:, [0, 0, 1, 2]], torch.tensor([0, 0, 1, 1]), A, V)
    assert torch.allclose(weighted, repeated[:, 1:], atol=1e-14)


# --------------------------------------------------------------------------- Def 4.1: conditional Wasserstein distance


def _brute_force_w2c(X: torch.Tensor, Y: torch.Tensor, pos: torch.Tensor) -> float:
    total = 0.0
    for s in pos.unique().tolist():
        a, b = X[pos == s], Y[pos == s]
        total += min(sum((a[k] - b[p[k]]).square().sum().item() for k in range(len(a)))
                     for p in itertools.permutations(range(len(a))))
    return math.sqrt(total / len(X))


@given(st.integers(0, 10_000), st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_conditional_w2_matches_brute_force(seed: int, counts: list[int]) -> None:
    g = torch.Generator().manual_seed(seed)
    pos = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    X = torch.randn(len(pos), 2, generator=g, dtype=F64)
    Y = torch.randn(len(pos), 2, generator=g, dtype=F64)
    assert conditional_w2(X, Y, pos) == pytest.approx(_brute_force_w2c(X, Y, pos), rel=1e-12, abs=1e-14)


def test_conditional_w2_properties(gen: torch.Generator) -> None:
    pos = torch.tensor([0, 0, 0, 1, 1, 2])
    X = torch.randn(6, 3, generator=gen, dtype=F64)
    Y = torch.randn(6, 3, generator=gen, dtype=F64)
    assert conditional_w2(X, X, pos) == 0.0
    assert conditional_w2(X, Y, pos) == pytest.approx(conditional_w2(Y, X, pos), rel=1e-14)
    # permuting atoms inside a position changes nothing; moving one across positions gives +inf
    assert conditional_w2(X[[2, 0, 1, 4, 3, 5]], Y, pos) == pytest.approx(conditional_w2(X, Y, pos), rel=1e-14)
    assert conditional_w2(X, Y, pos, torch.tensor([0, 0, 1, 1, 1, 2])) == math.inf
    assert conditional_w2(X, Y[:5], pos, pos[:5]) == math.inf
    # one atom per position: no transport, the Euclidean distance over sqrt(N) (Lemma 4.2)
    one = torch.arange(6)
    assert conditional_w2(X, Y, one) == pytest.approx((X - Y).norm().item() / math.sqrt(6), rel=1e-14)
    # conditioning can only cost more than the plain W2 of the uniform measures on the same atoms
    assert conditional_w2(X, Y, pos) >= conditional_w2(X, Y, torch.zeros(6)) - 1e-14


def test_lemma_4_2_isometry(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen)
    X, Y = torch.randn(2, 1, 7, 3, generator=gen, dtype=F64)
    f = self_attention
    euclid = ((f(X, A, V, masked=True) - f(Y, A, V, masked=True)).norm() / (X - Y).norm()).item()
    assert masked_mean_field_ratio(X, Y, torch.arange(7), A, V).item() == pytest.approx(euclid, rel=1e-12)
