"""Lipschitz bounds of L2 self-attention (Kim, Papamakarios & Mnih, 2021, Theorem 3.2) and what they rest on.

The Lambert-W term ``φ⁻¹(N-1) = W₀((N-1)/e)``, ``φ(x) = x e^{x+1}``, is the largest value of
``sum_j P_ij |q_i - q_j|² / τ`` over the ``N - 1`` other tokens (:func:`softmax_distance_sum`).
The 2-norm bound's weight factor is ``|W^{Q,h}|₂² |W^{V,h}|₂`` (the map scales like ``|W^Q|²``);
``sharpened=True`` replaces the constant ``4`` by ``2√2`` (our derivation, chapter 31).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from scipy.special import lambertw
from torch import Tensor

from ..arguments import as_count, as_real
from .dense import jacobian_matrix
from .l2_self_attention import L2Heads

__all__ = [
    "exact_local_lipschitz_inf",
    "phi_inverse",
    "softmax_distance_sum",
    "theorem_3_2_inf",
    "theorem_3_2_two",
    "theorem_3_2_two_as_printed",
]


def phi_inverse(y: float | Tensor) -> Tensor:
    """Theorem 3.2: the inverse of ``φ(x) = x e^{x+1}`` on ``[0, ∞)``, ``W₀(y/e)`` (principal Lambert W), float64."""
    y = as_real(y, "y")
    if bool((y < 0).any()):
        raise ValueError("phi_inverse needs y >= 0")
    return torch.as_tensor(lambertw(y.cpu().numpy() / math.e).real, dtype=torch.float64)


def softmax_distance_sum(z: Tensor) -> Tensor:
    """``sum_j z_j e^{-z_j} / (1 + sum_j e^{-z_j})`` for squared distances ``z`` ``(..., N-1)``: the proof's quantity.

    With ``z_j = |q_i - q_j|² / τ`` over the other tokens it is ``sum_j P_ij |q_i - q_j|² / τ``; its
    maximum over ``z >= 0`` is ``φ⁻¹(N - 1)``.
    """
    w = torch.exp(-z)
    return (z * w).sum(-1) / (1 + w.sum(-1))


def _inf_norm(M: Tensor) -> Tensor:
    """Operator ∞-norm (largest absolute row sum) of the last two dimensions."""
    return M.abs().sum(-1).amax(-1)


def _two_norm(M: Tensor) -> Tensor:
    return torch.linalg.matrix_norm(M.double(), ord=2)


def _check_tied(heads: L2Heads) -> None:
    if not heads.tied:
        raise ValueError("Theorem 3.2 holds for tied weights W^K = W^Q only: heads.K must be None")


def theorem_3_2_inf(heads: L2Heads, N: int | Tensor) -> Tensor:
    """Theorem 3.2 (∞-norm): ``(4 φ⁻¹(N-1) + 1/τ) |W^Oᵀ|_∞ max_h |W^{Q,h}|_∞ |W^{Q,h}ᵀ|_∞ max_h |W^{V,h}ᵀ|_∞``."""
    _check_tied(heads)
    Q, V = heads.Q.double(), heads.V.double()
    out = 1.0 if heads.W is None else _inf_norm(heads.W.double().mT)
    weights = (_inf_norm(Q) * _inf_norm(Q.mT)).max() * _inf_norm(V.mT).max() * out
    return (4 * phi_inverse(as_count(N, "N") - 1) + 1 / heads.tau) * weights


def theorem_3_2_two(heads: L2Heads, N: int | Tensor, *, sharpened: bool = False) -> Tensor:
    """Theorem 3.2 (2-norm): ``sqrt(N)/τ (4 φ⁻¹(N-1) + 1) (sum_h |W^{Q,h}|₂⁴ |W^{V,h}|₂²)^{1/2} |W^O|₂``.

    ``sharpened=True``: the constant ``2√2`` in place of ``4`` (chapter 31's derivation).
    """
    _check_tied(heads)
    out = 1.0 if heads.W is None else _two_norm(heads.W)
    weights = (_two_norm(heads.Q).pow(4) * _two_norm(heads.V).square()).sum().sqrt() * out
    c = 2 * math.sqrt(2) if sharpened else 4.0
    N = as_count(N, "N")
    return N.sqrt() / heads.tau * (c * phi_inverse(N - 1) + 1) * weights


def theorem_3_2_two_as_printed(heads: L2Heads, N: int | Tensor) -> Tensor:
    """Theorem 3.2 (2-norm) as Kim et al. print it: ``|W^{Q,h}|₂`` to the first power, and ``W₀(N/e)`` (their
    value of ``φ⁻¹(N-1)``, larger than the true ``W₀((N-1)/e)``, so the most generous reading)."""
    _check_tied(heads)
    out = 1.0 if heads.W is None else _two_norm(heads.W)
    weights = (_two_norm(heads.Q).square() * _two_norm(heads.V).square()).sum().sqrt() * out
    N = as_count(N, "N")
    return N.sqrt() / heads.tau * (4 * phi_inverse(N) + 1) * weights


def exact_local_lipschitz_inf(fn: Callable[[Tensor], Tensor], X: Tensor) -> Tensor:
    """The exact local constant for the ∞-norm: largest absolute row sum of the dense float64 ``D_X fn``, ``(B,)``."""
    return _inf_norm(jacobian_matrix(fn, X))
