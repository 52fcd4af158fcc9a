"""L2 self-attention (Kim et al., 2021, Sec. 3): closed-form Jacobian products against autograd in float64."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from lipnb import exact_local_lipschitz, local_lipschitz
from lipnb.core.l2_self_attention import (
    L2AttentionMap,
    L2Heads,
    _l2_scores,
    l2_attention,
    random_l2_heads,
    untied_blowup_input,
)


def _assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to float64 round-off relative to the largest entry (saturated softmaxes cancel digits)."""
    assert float((a - b).abs().max()) <= 1e-9 * max(float(b.abs().max()), 1.0)


def _autograd_products(heads: L2Heads, X: torch.Tensor, E: torch.Tensor, G: torch.Tensor):
    _, jv = torch.func.jvp(lambda Z: l2_attention(Z, heads), (X,), (E,))
    _, pullback = torch.func.vjp(lambda Z: l2_attention(Z, heads), X)
    return jv, pullback(G)[0]


@settings(max_examples=25, deadline=None)
@given(H=st.sampled_from([1, 2]), tied=st.booleans(), out=st.booleans(), n=st.integers(1, 6),
       scale=st.floats(0.1, 4.0), seed=st.integers(0, 10_000))
def test_closed_form_products_match_autograd(H: int, tied: bool, out: bool, n: int, scale: float, seed: int) -> None:
    heads = random_l2_heads(4, H, tied=tied, out=out, scale=scale, seed=seed)
    g = torch.Generator().manual_seed(seed)
    X = 2 * torch.randn(3, n, 4, generator=g, dtype=torch.float64)
    lin = L2AttentionMap(heads).linearize(X)
    E = torch.randn(X.shape, generator=g, dtype=torch.float64)
    G = torch.randn(lin.output.shape, generator=g, dtype=torch.float64)
    jv, vj = _autograd_products(heads, X, E, G)
    torch.testing.assert_close(lin.output, l2_attention(X, heads), rtol=0, atol=0)
    _assert_close(lin.jvp(E), jv)
    _assert_close(lin.vjp(G), vj)
    sub = lin.select(torch.tensor([2, 0]))
    _assert_close(sub.jvp(E[[2, 0]]), jv[[2, 0]])


def test_scores_are_negative_squared_distances() -> None:
    heads = random_l2_heads(6, 2, tied=False, seed=3)
    X = torch.randn(2, 5, 6, dtype=torch.float64)
    q = X.unsqueeze(1) @ heads.Q
    k = X.unsqueeze(1) @ heads.K
    expected = -torch.cdist(q, k).square() / heads.tau
    torch.testing.assert_close(_l2_scores(X, heads), expected, rtol=1e-12, atol=1e-12)


def test_single_head_matches_the_paper_row_formula() -> None:
    """``P X A W^V`` with ``A = W^Q W^Qᵀ / sqrt(D/H)``, written out for one head and one input."""
    heads = random_l2_heads(4, 1, out=False, seed=7)
    X = torch.randn(1, 5, 4, dtype=torch.float64)
    W, WV, x = heads.Q[0], heads.V[0], X[0]
    q = x @ W
    P = torch.softmax(-torch.cdist(q, q).square() / 2.0, dim=-1)
    torch.testing.assert_close(l2_attention(X, heads)[0], P @ x @ (W @ W.T / 2.0) @ WV, rtol=1e-12, atol=1e-12)


def test_local_lipschitz_uses_the_closed_form() -> None:
    heads = random_l2_heads(6, 3, seed=1)
    X = 3 * torch.randn(4, 7, 6, dtype=torch.float64)
    F = L2AttentionMap(heads)
    torch.testing.assert_close(local_lipschitz(F, X, tol=1e-12), exact_local_lipschitz(F, X), rtol=1e-7, atol=0)


def test_untied_constant_grows_like_t_squared_and_tied_stays_bounded() -> None:
    eye = torch.eye(3, dtype=torch.float64)[None]
    X = untied_blowup_input(torch.tensor([8.0, 16.0, 32.0]), 3)
    untied = exact_local_lipschitz(L2AttentionMap(L2Heads(Q=eye, V=eye, K=2 * eye)), X)
    tied = exact_local_lipschitz(L2AttentionMap(L2Heads(Q=eye, V=eye)), X)
    ratios = untied[1:] / untied[:-1]
    assert torch.all((ratios > 3.8) & (ratios < 4.2)), ratios
    assert tied.max() < 2.0, tied


def test_bad_shapes_are_rejected() -> None:
    with pytest.raises(ValueError, match="V must"):
        L2Heads(torch.zeros(2, 4, 2), torch.zeros(1, 4, 2))
    with pytest.raises(ValueError, match="W must"):
        L2Heads(torch.zeros(2, 4, 2), torch.zeros(2, 4, 2), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="D = 5"):
        L2AttentionMap(random_l2_heads(4)).linearize(torch.zeros(1, 2, 5, dtype=torch.float64))
