"""Attention on measures (Sec. 3.3, App. C): weighted and repeated tokens, Wasserstein distances, masked mean field."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from scipy.optimize import linear_sum_assignment

from .attention import log_weights, scores, self_attention
from .dense import jacobian_matrix, weighted_operator_norm
from .inputs import repeat_tokens
from .jacobian import attention_covariances

__all__ = [
    "conditional_w2",
    "masked_mean_field",
    "masked_mean_field_ratio",
    "own_query_norms",
    "repeated_token_lipschitz",
    "synchronous_lipschitz",
    "wasserstein2_empirical",
    "weighted_attention_lipschitz",
]


def own_query_norms(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, weights: torch.Tensor | None = None,
                    queries: torch.Tensor | None = None) -> torch.Tensor:
    """Lemma C.6, middle term: ``||D_z Γ_μ||_2 = ||V Cov_μ(z) A||_2`` for each query ``z``, shape ``(B, m)``.

    This is how fast the output of a particle at ``z`` moves when only that particle moves.
    """
    cov = attention_covariances(Y, A, weights=weights, queries=queries)
    return torch.linalg.matrix_norm(V @ cov @ A, ord=2)


def weighted_attention_lipschitz(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor,
                                 weights: torch.Tensor) -> torch.Tensor:
    """Lemma C.5: ``||W^{1/2} D_Y f_w W^{-1/2}||_2`` with each sequence's own weights ``(B, K)``, float64, ``(B,)``.

    :func:`lipnb.weighted_operator_norm` with Def C.4's map at weights ``(K,)`` or ``(B, K)``.
    """
    Y, A, V = Y.double(), A.double(), V.double()
    w = torch.as_tensor(weights, dtype=torch.float64).expand(Y.shape[:2])
    return weighted_operator_norm(lambda Z: self_attention(Z, A, V, weights=w), Y, w)


def synchronous_lipschitz(fn: Callable[[torch.Tensor], torch.Tensor], Y: torch.Tensor,
                          counts: torch.Tensor) -> torch.Tensor:
    """Lemma C.5 (our reading): ``||D_X f||`` on perturbations moving all copies of each token together, ``(B,)``.

    ``X`` repeats ``y_k`` ``m_k`` times; the perturbations ``(η_1 x m_1, ..., η_K x m_K)`` form a subspace
    with orthonormal basis ``R diag(m)^{-1/2}``, ``R`` the replication matrix.
    """
    counts = torch.as_tensor(counts, dtype=torch.long)
    X = repeat_tokens(Y, counts).double()
    d = Y.shape[-1]
    J = jacobian_matrix(fn, X)
    K = len(counts)
    R = torch.eye(K, dtype=torch.float64).repeat_interleave(counts, dim=0) / counts.double().sqrt().unsqueeze(0)
    basis = torch.kron(R, torch.eye(d, dtype=torch.float64))
    return torch.linalg.matrix_norm(J @ basis, ord=2)


def repeated_token_lipschitz(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor,
                             counts: torch.Tensor) -> torch.Tensor:
    """Our correction of Lemma C.5: ``Lip_X(f) = max(||D_Y f_w||_w, max_{m_k >= 2} ||V Cov_k A||_2)``, ``(B,)``.

    ``X`` repeats ``y_k`` ``m_k`` times, ``w = m / n``: copies moving together see the weighted norm,
    copies moving apart only their own query term.
    """
    counts = torch.as_tensor(counts, dtype=torch.long)
    w = counts.double() / counts.sum()
    Y = Y.double()
    rigid = weighted_attention_lipschitz(Y, A, V, w)
    own = own_query_norms(Y, A.double(), V.double(), weights=w)
    split = own[:, counts >= 2].amax(1) if bool((counts >= 2).any()) else torch.zeros_like(rigid)
    return torch.maximum(rigid, split)


def wasserstein2_empirical(X: torch.Tensor, Y: torch.Tensor) -> float:
    """Sec. 3.1: ``W_2`` between the empirical measures of two sequences of the same length (exact assignment)."""

    X = X.double().reshape(-1, X.shape[-1])
    Y = Y.double().reshape(-1, Y.shape[-1])
    if X.shape != Y.shape:
        raise ValueError(f"need two sequences of the same shape; got {tuple(X.shape)} and {tuple(Y.shape)}")
    cost = (X.unsqueeze(1) - Y.unsqueeze(0)).square().sum(-1)
    rows, cols = linear_sum_assignment(cost.numpy())
    return math.sqrt(float(cost[rows, cols].mean()))


def masked_mean_field(X: torch.Tensor, positions: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """Def 2.6: the atoms ``Γ(s_k, x_k)`` of ``F^m(μ)`` for ``μ = Σ_k w_k δ_(s_k, x_k)``, shape ``(B, N, d_v)``.

    Atom ``k`` attends to every atom ``j`` with ``s_j <= s_k`` (same position included), with
    weights ``w_j e^{<A x_k, x_j>}``; positions are unchanged, so they are not returned. ``X`` is
    ``(B, N, d)``, ``positions`` ``(N,)`` or ``(B, N)``, ``weights`` (default uniform) likewise.
    One atom per position gives masked self-attention (Def 2.5); one position gives Def 2.1.
    """
    logits = scores(X, A)
    if weights is not None:
        logits = logits + log_weights(weights, X)
    s = torch.as_tensor(positions, device=X.device).expand(X.shape[:2])
    future = s.unsqueeze(-2) > s.unsqueeze(-1)
    return torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1) @ (X @ V.mT)


def conditional_w2(X: torch.Tensor, Y: torch.Tensor, positions: torch.Tensor,
                   positions_y: torch.Tensor | None = None) -> float:
    """Def 4.1: the conditional ``W_2`` between ``(1/N) Σ δ_(s_k, x_k)`` and ``(1/N) Σ δ_(t_k, y_k)``, exactly.

    Plans must keep the position fixed: the squared distance is ``(1/N) Σ_s`` (optimal assignment cost
    between the atoms at position ``s``), one ``linear_sum_assignment`` per position. ``inf`` when the
    position marginals differ. ``X``, ``Y`` are ``(N, d)``; ``positions`` ``(N,)`` (``positions_y``
    defaults to it).
    """

    x = X.detach().double().cpu().numpy()
    y = Y.detach().double().cpu().numpy()
    s = torch.as_tensor(positions).cpu().numpy()
    t = s if positions_y is None else torch.as_tensor(positions_y).cpu().numpy()
    if x.shape[0] != y.shape[0] or sorted(s.tolist()) != sorted(t.tolist()):
        return float("inf")
    total = 0.0
    for p in set(s.tolist()):
        a, b = x[s == p], y[t == p]
        cost = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        rows, cols = linear_sum_assignment(cost)
        total += float(cost[rows, cols].sum())
    return (total / x.shape[0]) ** 0.5


def masked_mean_field_ratio(X: torch.Tensor, Y: torch.Tensor, positions: torch.Tensor, A: torch.Tensor,
                            V: torch.Tensor) -> torch.Tensor:
    """Theorem 4.4's ratio ``W_c(F^m(μ), F^m(ν)) / W_c(μ, ν)`` for uniform measures on the atoms of ``X``, ``Y``.

    ``X``, ``Y`` are ``(B, N, d)`` with the same ``positions`` ``(N,)``; :func:`conditional_w2` on both
    sides, :func:`masked_mean_field` in between; shape ``(B,)``, float64.
    """
    FX, FY = masked_mean_field(X, positions, A, V), masked_mean_field(Y, positions, A, V)
    return torch.tensor([conditional_w2(fx, fy, positions) / conditional_w2(x, y, positions)
                         for x, y, fx, fy in zip(X, Y, FX, FY, strict=True)], dtype=torch.float64)
