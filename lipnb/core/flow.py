"""Attention as a flow (Sec. 3.4): the residual stack as an Euler scheme, its Jacobians and its clusters."""

from __future__ import annotations

import torch
from scipy.cluster.hierarchy import fcluster, linkage

from ..arguments import as_real, check_positive_int
from .attention import self_attention
from .jacobian import lemma_c_2_term_matrices

__all__ = [
    "attention_flow",
    "attention_flow_rk4",
    "cluster_labels",
    "flow_jacobians",
]


def attention_flow(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, L: int) -> torch.Tensor:
    """Slides IV: ``L`` residual layers ``X <- X + (T/L) f(X)``, the Euler scheme of ``dx_i/dt = Γ_μ(t)(x_i)``.

    ``X0`` is ``(B, n, d)``; returns the whole trajectory, shape ``(L + 1, B, n, d)``, layer ``k`` at
    time ``k T / L``. With ``T = 1`` this is the slides' stack ``X + (1/L) f(X)``.
    """
    h = float(as_real(T, "T")) / check_positive_int(L, "L")
    states = [X0]
    for _ in range(L):
        states.append(states[-1] + h * self_attention(states[-1], A, V))
    return torch.stack(states)


def attention_flow_rk4(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, steps: int) -> torch.Tensor:
    """Reference solution of ``dx_i/dt = Γ_μ(t)(x_i)`` at time ``T``: classical Runge–Kutta, ``steps`` steps."""
    h = float(as_real(T, "T")) / check_positive_int(steps, "steps")
    X = X0
    for _ in range(steps):
        k1 = self_attention(X, A, V)
        k2 = self_attention(X + h / 2 * k1, A, V)
        k3 = self_attention(X + h / 2 * k2, A, V)
        k4 = self_attention(X + h * k3, A, V)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


def flow_jacobians(states: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Lemma C.2 in closed form: dense ``D_X f`` of self-attention at each state ``(B, n, d)``, ``(B, n d_v, n d)``.

    Block ``(i, j)`` is ``V [P_ij I + δ_ij Cov_i A + P_ij (x_j - x̄_i)(A x_i)ᵀ]`` (the sum of
    :func:`lipnb.core.jacobian.lemma_c_2_term_matrices`, times ``V``); batched, float64, no autodiff.
    """
    B, n, d = states.shape
    J = lemma_c_2_term_matrices(states, A).sum(1).view(B, n, d, n, d)
    return torch.einsum("vd,bidje->bivje", V.double(), J).reshape(B, n * V.shape[0], n * d)


def cluster_labels(Y: torch.Tensor, tol: float) -> torch.Tensor:
    """Single-linkage clusters of the points ``Y`` ``(n, d)``: points closer than ``tol`` share a label, ``(n,)``."""

    if not tol > 0:
        raise ValueError(f"tol must be > 0; got {tol}")

    if Y.shape[0] < 2:
        return torch.zeros(Y.shape[0], dtype=torch.long)
    labels = fcluster(linkage(Y.detach().double().cpu().numpy(), "single"), t=tol, criterion="distance")
    return torch.as_tensor(labels - 1, dtype=torch.long)
