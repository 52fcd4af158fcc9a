"""Invertible self-attention (Kim, Papamakarios & Mnih, 2021, Sec. 4): ``G(X) = X + c F(X)`` with ``c Lip(F) < 1``.

The residual branch ``c F`` is then a contraction, so ``G`` is invertible and ``G⁻¹(Y)`` is the fixed
point of ``Z ↦ Y - c F(Z)`` (Banach), reached geometrically at rate at most ``c Lip(F)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["FixedPointResult", "contraction_coefficient", "fixed_point_inverse", "geometric_rate", "residual_map"]

Map = Callable[[Tensor], Tensor]


def contraction_coefficient(lipschitz_bound: float | Tensor, rho: float = 0.5) -> float:
    """``c = ρ / L`` for an upper bound ``L`` of ``Lip(F)``: the branch ``c F`` is then ``ρ``-Lipschitz."""
    L = float(lipschitz_bound)
    if not 0 < rho < 1:
        raise ValueError(f"rho must lie in (0, 1) for a contraction; got {rho}")
    if not L > 0:
        raise ValueError(f"lipschitz_bound must be positive; got {L}")
    return rho / L


def residual_map(fn: Map, c: float) -> Map:
    """Sec. 4: ``X ↦ X + c fn(X)``."""
    return lambda X: X + c * fn(X)


@dataclass(frozen=True)
class FixedPointResult:
    """``Z``, the last iterate ``(B, n, d)``; ``errors`` ``(iterations + 1, B)``: ``|Z_k - X|`` (``X`` given) or
    the residual ``|Z_k + c F(Z_k) - Y|``; ``converged`` ``(B,)``: the last error below ``tol``."""

    Z: Tensor
    errors: Tensor
    converged: Tensor


def fixed_point_inverse(fn: Map, Y: Tensor, c: float, *, iterations: int = 50, X: Tensor | None = None,
                        tol: float = 1e-10) -> FixedPointResult:
    """Sec. 4: ``Z_{k+1} = Y - c fn(Z_k)`` from ``Z_0 = Y``; errors against the true preimage ``X`` when given.

    Per input, errors are measured relative to ``|Y|`` (Frobenius). Non-convergence is flagged, not raised.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1; got {iterations}")
    scale = Y.flatten(1).norm(dim=1).clamp_min(torch.finfo(Y.dtype).tiny)

    def error(Z: Tensor) -> Tensor:
        gap = Z - X if X is not None else Z + c * fn(Z) - Y
        return gap.flatten(1).norm(dim=1) / scale

    Z = Y.clone()
    errors = [error(Z)]
    for _ in range(iterations):
        Z = Y - c * fn(Z)
        errors.append(error(Z))
    errs = torch.stack(errors)
    return FixedPointResult(Z, errs, torch.isfinite(errs[-1]) & (errs[-1] < tol))


def geometric_rate(errors: Tensor, *, low: float = 1e-14, high: float = 1e-8) -> Tensor:
    """The contraction factor per iteration near the fixed point: the median ratio ``e_{k+1} / e_k`` over the
    steps whose error ``e_k`` lies in ``(low, high)`` (past the transient, above round-off), per column of
    ``errors`` ``(K, B)``; NaN where fewer than two steps qualify."""
    ratios = errors[1:] / errors[:-1]
    keep = (errors[:-1] > low) & (errors[:-1] < high) & torch.isfinite(ratios)
    rates = [r[k].median() if int(k.sum()) >= 2 else r.new_tensor(float("nan")) for r, k in zip(ratios.T, keep.T,
                                                                                                 strict=True)]
    return torch.stack(rates)
