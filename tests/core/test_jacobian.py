"""The Jacobian of self-attention in :mod:`lipnb.core.jacobian`: Lemma C.2's terms, score gaps and the selection
Jacobian of the large-radius limit (Theorem 3.7), and Jacobian block norms (Lemma D.1)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_attention_params, random_attention_problem, random_head_matrix

from lipnb import jacobian_matrix, self_attention
from lipnb.core.bounds import theorem_3_7_limit
from lipnb.core.jacobian import jacobian_block_norms, lemma_c_2_term_matrices, score_gaps, selection_jacobian
from lipnb.core.l2_self_attention import L2Heads, l2_attention

F64 = torch.float64


@pytest.mark.parametrize("masked", [False, True])
def test_lemma_c_2_terms_sum_to_the_jacobian(gen: torch.Generator, masked: bool) -> None:
    X, A = 1.5 * torch.randn(2, 5, 3, generator=gen, dtype=F64), random_head_matrix(gen, 3)
    terms = lemma_c_2_term_matrices(X, A, masked=masked)
    J = jacobian_matrix(lambda Z: self_attention(Z, A, torch.eye(3, dtype=F64), masked=masked), X)
    assert torch.allclose(terms.sum(1), J, atol=1e-12)


def test_score_gaps_and_selection(gen: torch.Generator) -> None:
    X, A, V = random_attention_problem(gen)
    scores = (X @ A.mT) @ X.mT
    top = scores.sort(-1, descending=True).values
    assert torch.allclose(score_gaps(X, A), top[..., 0] - top[..., 1])
    masked = score_gaps(X, A, masked=True)
    assert bool(torch.isinf(masked[:, 0]).all()) and bool(torch.isfinite(masked[:, 1:]).all())
    S = selection_jacobian(X, A, V)
    E = torch.randn(X.shape, generator=gen, dtype=F64)
    m = scores.argmax(-1)
    expected = torch.stack([E[b, m[b]] @ V.mT for b in range(2)])
    assert torch.allclose((S @ E.flatten(1).unsqueeze(-1)).view(2, 5, -1), expected)
    assert torch.allclose(torch.linalg.matrix_norm(S, ord=2), theorem_3_7_limit(X, A, V))
    Sm = selection_jacobian(X, A, V, masked=True)
    assert torch.allclose(torch.linalg.matrix_norm(Sm, ord=2), theorem_3_7_limit(X, A, V, masked=True))


# --------------------------------------------------------------------------- Jacobian block norms (Lemma D.1)


def test_jacobian_block_norms_exact_and_probed(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen, d_v=2)
    X = torch.randn(1, 5, 3, generator=gen, dtype=F64)
    f = lambda Z: self_attention(Z, A, V, masked=True)  # noqa: E731
    J = jacobian_matrix(f, X)[0].view(5, 2, 5, 3)
    exact = J.square().sum((1, 3)).sqrt()
    assert torch.allclose(jacobian_block_norms(f, X, chunk=4), exact, rtol=1e-12, atol=0)
    probed = jacobian_block_norms(f, X, probes=4000)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert bool((probed[future] == 0).all()) and bool((exact[future] == 0).all())
    assert torch.allclose(probed[~future], exact[~future], rtol=0.1)


def test_differentiable_jacobian_is_the_same_matrix_and_carries_gradients() -> None:
    """``jacobian_matrix(differentiable=True)``: the forward-mode float64 matrix, for a map with argument checks
    (input after input) and one without (vectorized), and ``X``'s graph kept for a gradient step."""
    g = torch.Generator().manual_seed(3)
    X = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    A = torch.randn(2, 2, generator=g, dtype=torch.float64)
    heads = L2Heads(Q=torch.randn(1, 2, 2, generator=g, dtype=torch.float64),
                    V=torch.randn(1, 2, 2, generator=g, dtype=torch.float64))
    for fn in (lambda Z: self_attention(Z, A, A), lambda Z: l2_attention(Z, heads, check=False)):
        Xg = X.clone().requires_grad_(True)
        J = jacobian_matrix(fn, Xg, differentiable=True)
        torch.testing.assert_close(J.detach(), jacobian_matrix(fn, X), rtol=1e-12, atol=1e-12)
        (grad,) = torch.autograd.grad(torch.linalg.matrix_norm(J, ord=2).sum(), Xg)
        assert grad.shape == X.shape and bool(grad.abs().sum() > 0)
