"""Lemma C.2 taken apart: the attention covariances, the three term matrices and the large-radius limit."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .attention import mask_future

__all__ = [
    "attention_covariances",
    "jacobian_block_norms",
    "lemma_c2_term_matrices",
    "score_gaps",
    "selection_jacobian",
    "weighted_covariances",
]


def _masked_scores(X: torch.Tensor, A: torch.Tensor, masked: bool) -> torch.Tensor:
    scores = (X @ A.mT) @ X.mT
    return mask_future(scores) if masked else scores


def score_gaps(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): per row, largest minus second-largest score ``<A x_i, x_j>``, ``(B, n)``.

    A row with a single admissible token (row 1 when masked) has gap ``inf``; at ``RX`` the gaps scale by ``R²``.
    """
    scores = _masked_scores(X, A, masked)
    if X.shape[1] < 2:
        return torch.full(X.shape[:2], math.inf, dtype=scores.dtype, device=X.device)
    top = scores.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def selection_jacobian(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): the matrix ``(B, n d_v, n d)`` of the limit ``ε ↦ (V ε_{m_1}, ..., V ε_{m_n})``.

    ``m_i = argmax_j <A x_i, x_j>`` (over ``j <= i`` when masked); off the null set of ties it is unique.
    """
    m = _masked_scores(X, A, masked).argmax(-1)
    B, n, d = X.shape
    one_hot = torch.nn.functional.one_hot(m, n).to(V.dtype)
    return torch.einsum("bij,ek->biejk", one_hot, V).reshape(B, n * V.shape[0], n * d)


def lemma_c2_term_matrices(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Lemma C.2 (``V = I``): the three terms of ``D_X f`` as dense matrices ``(B, 3, n d, n d)``, float64.

    Blocks ``(i, j)``: ``P_ij I``; ``δ_ij Cov_i A``; ``P_ij (x_j - x̄_i)(A x_i)ᵀ``. Their sum is the Jacobian.
    """
    from .attention import attention_matrix

    X, A = X.double(), A.double()
    B, n, d = X.shape
    P = attention_matrix(X, A, masked=masked)
    centred = X.unsqueeze(1) - (P @ X).unsqueeze(2)                    # (B, i, j, d): x_j - x̄_i
    cov = weighted_covariances(P, X)
    eye = torch.eye(d, dtype=torch.float64)
    mean = torch.einsum("bij,de->bidje", P, eye)
    own = torch.einsum("bide,ij->bidje", cov @ A, torch.eye(n, dtype=torch.float64))
    spread = torch.einsum("bij,bijd,bie->bidje", P, centred, X @ A.mT)
    return torch.stack([mean, own, spread], 1).reshape(B, 3, n * d, n * d)


def attention_covariances(Y: torch.Tensor, A: torch.Tensor, *, weights: torch.Tensor | None = None,
                          queries: torch.Tensor | None = None) -> torch.Tensor:
    """Lemma C.2 / C.6: covariance ``(B, m, d, d)`` of ``μ = Σ w_j δ_{y_j}`` under the kernel ``∝ w_j e^{<A z, y_j>}``.

    One covariance per query ``z`` (default: the tokens themselves, giving ``Cov_i`` of Lemma C.2).
    """
    Z = Y if queries is None else queries
    scores = (Z @ A.mT) @ Y.mT
    if weights is not None:
        w = torch.as_tensor(weights, dtype=Y.dtype, device=Y.device).expand(Y.shape[:2])
        scores = scores + torch.log(w / w.sum(-1, keepdim=True)).unsqueeze(1)
    return weighted_covariances(torch.softmax(scores, dim=-1), Y)


def weighted_covariances(P: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Lemma C.2's ``Cov_k = Σ_j P_kj (y_j - ȳ_k)(y_j - ȳ_k)ᵀ`` with ``ȳ_k = Σ_j P_kj y_j``, ``(B, m, d, d)``.

    Every dense attention covariance of lipnb is this one; the closed-form Jacobian products and the
    data-dependent bound apply ``Cov_k`` to vectors without forming it.
    """
    centred = Y.unsqueeze(1) - (P @ Y).unsqueeze(2)
    return torch.einsum("bkj,bkjd,bkje->bkde", P, centred, centred)


def jacobian_block_norms(fn: Callable[[torch.Tensor], torch.Tensor], X: torch.Tensor, *, probes: int | None = None,
                         chunk: int = 256, seed: int = 0) -> torch.Tensor:
    """Lemma D.1's block structure: Frobenius norms ``||∂fn(X)_i / ∂x_j||_F`` of the Jacobian at ``X`` ``(1, n, d)``.

    Returns ``(n', n)`` from batched vector-Jacobian products, ``chunk`` at a time: exact with all ``n' d'``
    basis cotangents (``probes=None``), else the Hutchinson estimate from ``probes`` Gaussian cotangents per
    output token (``E ||J_ijᵀ g||² = ||J_ij||_F²``). A zero block gives exactly zero either way.
    """
    Y, pullback = torch.func.vjp(fn, X.detach())
    n_out, d_out = Y.shape[1:]
    if probes is None:
        k, cot = d_out, torch.eye(n_out * d_out, dtype=Y.dtype, device=Y.device)
    else:
        g = torch.Generator(device="cpu").manual_seed(seed)
        k = probes
        noise = torch.randn(n_out, probes, d_out, generator=g, dtype=torch.float64).to(Y)
        cot = torch.einsum("ij,ipe->ipje", torch.eye(n_out, dtype=Y.dtype, device=Y.device), noise)
    cot = cot.reshape(-1, 1, n_out, d_out)
    rows = torch.cat([torch.func.vmap(lambda v: pullback(v)[0])(cot[i:i + chunk])
                      for i in range(0, len(cot), chunk)])                      # (n' k, 1, n, d)
    sq = rows.view(n_out, k, X.shape[1], X.shape[2]).square().sum(-1)
    return (sq.sum(1) if probes is None else sq.mean(1)).sqrt()
