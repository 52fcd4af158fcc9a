"""How close the inputs that an optimiser finds come to Theorem 3.2 (Kim et al., 2021): chapter 32.

The local constant of L2 attention at ``X`` is maximised over ``X`` (no ball: the map is globally
Lipschitz) by gradient ascent on the exact float64 norm of the dense Jacobian, from random starts
and from the configuration the proof's extremal step points to (:func:`proof_start`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from .l2_attention import L2Heads, l2_attention
from .l2_bounds import phi_inverse

__all__ = ["Norm", "jacobian_norm", "maximize_l2_lipschitz", "proof_start"]

Norm = Literal["2", "inf"]


def jacobian_norm(heads: L2Heads, X: Tensor, norm: Norm) -> Tensor:
    """``|D_X F|`` for the 2-norm (largest singular value) or the ∞-norm (largest absolute row sum), ``(B,)``.

    Dense and differentiable (``torch.func``), for the small ``N D`` of an optimisation.
    """
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    n, D = X.shape[1:]

    def single(x: Tensor) -> Tensor:
        return l2_attention(x.view(1, n, D), heads, check=False).reshape(-1)

    J = torch.func.vmap(torch.func.jacrev(single))(X.reshape(len(X), -1))
    if norm == "2":
        return torch.linalg.matrix_norm(J, ord=2)
    return J.abs().sum(-1).amax(-1)


def proof_start(heads: L2Heads, batch: int, N: int, *, seed: int = 0) -> Tensor:
    """Token 0 at the origin, the ``N - 1`` others at query distance ``sqrt(τ z*)``, ``z* = 1 + φ⁻¹(N-1)``.

    At ``z*`` the sum ``sum_j P_0j |q_0 - q_j|²/τ`` reaches its maximum ``φ⁻¹(N-1)`` (Theorem 3.2's
    proof). Directions are random; the radius is set in query space through ``W^{Q,1}`` (head 0).
    """
    g = torch.Generator().manual_seed(seed)
    D = heads.Q.shape[1]
    z_star = 1 + float(phi_inverse(N - 1))
    U = torch.randn(batch, N, D, generator=g, dtype=torch.float64)
    q = U @ heads.Q[0].double()
    X = U * (math.sqrt(heads.tau * z_star) / q.norm(dim=-1, keepdim=True))
    X[:, 0] = 0
    return X


def maximize_l2_lipschitz(heads: L2Heads, X0: Tensor, norm: Norm, *, steps: int = 100,
                          lr: float = 0.05) -> tuple[Tensor, Tensor]:
    """Gradient ascent (Adam) of :func:`jacobian_norm` from each start of ``X0``: best inputs and their constants."""
    heads = heads.to(X0.double())
    X = X0.detach().double().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([X], lr=lr)
    best, best_X = torch.full((len(X),), -torch.inf, dtype=torch.float64), X.detach().clone()
    for _ in range(steps + 1):
        v = jacobian_norm(heads, X, norm)
        better = v.detach() > best
        best = torch.where(better, v.detach(), best)
        best_X[better] = X.detach()[better]
        optimizer.zero_grad()
        (-v.sum()).backward()
        optimizer.step()
    return best_X, best
