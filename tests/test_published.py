"""The paper's published estimator and ``compute_A``, reproduced, against dense Jacobians and the HF modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from lipnb import exact_local_lipschitz, jacobian_matrix, models, self_attention
from lipnb.published import published_A, published_closed_form, published_estimator


def _dense_published(fn, X: torch.Tensor) -> torch.Tensor:
    """``√‖Jᵀ f(X)‖`` from the dense float64 Jacobian, one input at a time."""
    values = []
    for b in range(len(X)):
        x = X[b:b + 1]
        J = jacobian_matrix(fn, x).reshape(-1, x.numel())
        values.append((J.T @ fn(x).reshape(-1)).norm().sqrt())
    return torch.stack(values)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 6))
def test_published_estimator_is_sqrt_norm_of_jt_f(seed: int, n: int) -> None:
    g = torch.Generator().manual_seed(seed)
    d = 4
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    V = torch.randn(d, d, generator=g, dtype=torch.float64)
    X = torch.randn(2, n, d, generator=g, dtype=torch.float64)

    def fn(Y: torch.Tensor) -> torch.Tensor:
        return self_attention(Y, A, V)

    dense = _dense_published(fn, X)
    torch.testing.assert_close(published_estimator(fn, X, seed=seed), dense, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(published_closed_form(fn, X), dense, rtol=1e-9, atol=1e-12)


def test_published_estimator_is_not_the_local_constant() -> None:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 4, generator=g, dtype=torch.float64)
    X = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)

    def fn(Y: torch.Tensor) -> torch.Tensor:
        return self_attention(Y, A, torch.eye(4, dtype=torch.float64))

    ratio = published_estimator(fn, X) / exact_local_lipschitz(fn, X)
    assert bool(((ratio - 1).abs() > 0.05).all()), ratio


def test_published_estimator_rejects_unbatched_input() -> None:
    with pytest.raises(ValueError, match="Y must be"):
        published_estimator(lambda Y: Y, torch.zeros(3, 4))


@pytest.fixture(scope="module")
def minilm() -> torch.nn.Module:
    return models.load("minilm")[0]


@pytest.fixture(scope="module")
def gpt2() -> torch.nn.Module:
    return models.load("gpt2-random")[0]


def test_bert_published_A_is_the_head_matrix(minilm: torch.nn.Module) -> None:
    heads = models.head_matrices(minilm, 1)
    for h in (0, 5, 11):
        torch.testing.assert_close(published_A(minilm, 1, h), heads.A[h], rtol=1e-5, atol=1e-6)


def test_gpt2_published_A_is_unrelated_to_the_module_scores(gpt2: torch.nn.Module) -> None:
    """The true ``A_h`` reproduces GPT2Attention's attention matrix; the published one does not."""
    X = torch.randn(1, 6, 768, generator=torch.Generator().manual_seed(1))
    attn = gpt2.h[3].attn
    q, k, _ = attn.c_attn(X).split(768, dim=-1)
    h = 2
    cols = slice(64 * h, 64 * (h + 1))
    scores = q[0, :, cols] @ k[0, :, cols].T / 8
    bias_free = scores - (attn.c_attn.bias[:768][cols] @ k[0, :, cols].T / 8)
    true = models.head_matrices(gpt2, 3).A[h]
    torch.testing.assert_close(X[0] @ true.T @ X[0].T, bias_free, rtol=1e-4, atol=1e-4)
    wrong = published_A(gpt2, 3, h)
    assert abs(F.cosine_similarity(wrong.flatten(), true.flatten(), 0).item()) < 0.05
