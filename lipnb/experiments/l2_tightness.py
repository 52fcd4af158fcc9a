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

from ..core.attention import self_attention
from ..core.bounds import theorem_3_3
from ..core.dense import exact_local_lipschitz, jacobian_matrix
from ..core.inputs import ball_tokens, gradient_ascent, maximize_local_lipschitz, quadratic_growth_input
from ..core.l2_bounds import phi_inverse, theorem_3_2_inf, theorem_3_2_two, theorem_3_2_two_as_printed
from ..core.l2_self_attention import L2AttentionMap, L2Heads, l2_attention
from ..results import ResultTable, cached_table, progress
from .stats import fit_line

__all__ = ["Norm", "dot_and_l2_sweep", "fitted_rates", "identity_head", "jacobian_norm", "maximize_l2_lipschitz",
           "proof_start", "query_scaled", "tightness_sweep"]

Norm = Literal["2", "inf"]


def jacobian_norm(heads: L2Heads, X: Tensor, norm: Norm) -> Tensor:
    """``|D_X F|`` for the 2-norm (largest singular value) or the ∞-norm (largest absolute row sum), ``(B,)``.

    Dense and differentiable (:func:`lipnb.core.dense.jacobian_matrix`), for the small ``N D`` of an optimisation.
    """
    if norm not in ("2", "inf"):
        raise ValueError(f"norm must be '2' or 'inf', got {norm!r}")
    J = jacobian_matrix(lambda Z: l2_attention(Z, heads, check=False), X, differentiable=True)
    if norm == "2":
        return torch.linalg.matrix_norm(J, ord=2)
    return J.abs().sum(-1).amax(-1)


def query_scaled(heads: L2Heads, X: Tensor, s: float) -> tuple[float, float, float]:
    """With ``W^Q`` scaled by ``s`` and the inputs ``X / s`` (the same queries): the largest dense 2-norm local
    constant, Theorem 3.2's 2-norm bound as Kim et al. print it, and corrected (``c = 2√2``)."""
    scaled = L2Heads(Q=s * heads.Q, V=heads.V, W=heads.W)
    N = X.shape[1]
    return (float(exact_local_lipschitz(L2AttentionMap(scaled), X / s).max()),
            float(theorem_3_2_two_as_printed(scaled, N)), float(theorem_3_2_two(scaled, N, sharpened=True)))


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
    return gradient_ascent(lambda X: jacobian_norm(heads, X, norm), X0, steps=steps, lr=lr)


def identity_head(D: int = 2) -> L2Heads:
    """One head with ``W^Q = W^V = I_D`` and no output matrix: every weight norm in Theorem 3.2 equals one."""
    eye = torch.eye(D, dtype=torch.float64)[None]
    return L2Heads(Q=eye, V=eye)


def tightness_sweep(lengths: tuple[int, ...] = (2, 4, 8, 12, 16, 24, 32), *, D: int = 2, restarts: int = 4,
                    steps: int = 60, seed: int = 0) -> ResultTable:
    """Largest local constants found for :func:`identity_head` at each ``N``, both norms, both kinds of start.

    Columns ``N, norm`` (``"2-norm"`` or ``"inf-norm"``), ``start`` (``"random"`` or ``"proof"``), ``reached``
    (best over ``restarts`` starts),
    ``bound`` (Theorem 3.2, ``c = 4``) and ``sharpened`` (``c = 2√2`` for the 2-norm; the bound for ∞).
    """
    heads = identity_head(D)

    def compute() -> dict[str, list]:
        cols: dict[str, list] = {k: [] for k in ("N", "norm", "start", "reached", "bound", "sharpened")}
        g = torch.Generator().manual_seed(seed)
        for N in progress(lengths, "tightness"):
            starts = {"random": torch.randn(restarts, N, D, generator=g, dtype=torch.float64),
                      "proof": proof_start(heads, restarts, N, seed=seed + N)}
            for norm in ("2", "inf"):
                bound = theorem_3_2_two(heads, N) if norm == "2" else theorem_3_2_inf(heads, N)
                sharp = theorem_3_2_two(heads, N, sharpened=True) if norm == "2" else bound
                for start, X0 in starts.items():
                    _, best = maximize_l2_lipschitz(heads, X0, norm, steps=steps)
                    row = (N, f"{norm}-norm", start, float(best.max()), float(bound), float(sharp))
                    for key, value in zip(cols, row, strict=True):
                        cols[key].append(value)
        return cols

    return cached_table("l2_tightness", {"lengths": list(lengths), "D": D, "restarts": restarts, "steps": steps,
                                         "seed": seed}, compute)


def fitted_rates(table: ResultTable) -> ResultTable:
    """Growth of the best constants of :func:`tightness_sweep` in ``N`` against the bound's, one row per norm.

    ``lambert_slope``: slope of the constant against ``φ⁻¹(N-1)`` (the bound's is ``4``, or ``2√2``);
    ``power_exponent``: slope of ``log`` constant against ``log N`` (the bound's in ``bound_exponent``), over
    the sweep's range of ``N``; ``ratio_first``/``ratio_last``: reached over the (sharpened) bound at the
    smallest and largest ``N``.
    """
    cols: dict[str, list] = {k: [] for k in ("norm", "lambert_slope", "lambert_intercept", "power_exponent",
                                             "bound_exponent", "ratio_first", "ratio_last")}
    for norm in ("inf-norm", "2-norm"):
        rows = table.where(norm=norm).frame
        best = rows.groupby("N").agg(reached=("reached", "max"), sharpened=("sharpened", "first")).sort_index()
        N = torch.tensor(best.index.to_numpy(), dtype=torch.float64)
        reached = torch.tensor(best["reached"].to_numpy())
        sharp = torch.tensor(best["sharpened"].to_numpy())
        lam = fit_line(phi_inverse(N - 1), reached)
        power = fit_line(N.log(), reached.log())
        bound_power = fit_line(N.log(), sharp.log())
        ratio = reached / sharp
        for key, value in zip(cols, (norm, lam.slope, lam.intercept, power.slope, bound_power.slope,
                                     float(ratio[0]), float(ratio[-1])), strict=True):
            cols[key].append(value)
    return ResultTable.from_columns(cols, {"from": dict(table.provenance)})


def dot_and_l2_sweep(radii: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0), *, N: int = 6, D: int = 2,
                     steps: int = 40, seed: int = 0) -> ResultTable:
    """Dot-product and L2 attention with the same weights on ``B_R^N``: local constants and bounds per radius.

    Both use :func:`identity_head` (``W^Q = W^K = W^V = I``, ``τ = sqrt(D)``): dot-product attention is
    Def 2.1 with ``A = V = I/τ`` (the value ``A W^V`` of L2 attention). Inputs: the App. C.7 configuration
    (``"C.7"``), random tokens in the ball (``"random"``, largest of 16) and projected gradient ascent on the
    ball (``"optimised"``, from both). Bounds: Theorem 3.3 of Castin et al. (dot) and Theorem 3.2 (L2,
    ``c = 2√2``). Columns ``R, map, inputs, lip, bound``.
    """
    heads = identity_head(D)
    A = torch.eye(D, dtype=torch.float64) / heads.tau
    maps = {"dot": lambda X: self_attention(X, A, A), "l2": L2AttentionMap(heads)}

    def compute() -> dict[str, list]:
        cols: dict[str, list] = {k: [] for k in ("R", "map", "inputs", "lip", "bound")}
        for R in progress(radii, "dot vs L2"):
            inputs = {"C.7": quadratic_growth_input(R, N, D, seed=seed),
                      "random": ball_tokens(16, N, D, R, seed=seed)}
            for name, fn in maps.items():
                bound = theorem_3_3(A, A, R, N) if name == "dot" else theorem_3_2_two(heads, N, sharpened=True)
                lips = {k: exact_local_lipschitz(fn, X) for k, X in inputs.items()}
                starts = torch.cat([inputs["C.7"], inputs["random"][lips["random"].argsort()[-3:]]])
                _, opt = maximize_local_lipschitz(fn, starts, R, steps=steps)
                lips["optimised"] = opt
                for k, v in lips.items():
                    for key, value in zip(cols, (R, name, k, float(v.max()), float(bound)), strict=True):
                        cols[key].append(value)
        return cols

    return cached_table("dot_and_l2", {"radii": list(radii), "N": N, "D": D, "steps": steps, "seed": seed}, compute)
