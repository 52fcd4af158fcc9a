"""The large-radius limit of one head at one input (Theorem 3.7, Theorem 4.5 masked; chapter *Large radius*): the
Jacobian at ``RX`` against its argmax selection over a grid of radii, and the fitted Gaussian rate of convergence."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..arguments import as_real, check_bool, check_positive_int, check_tokens
from ..core.jacobian import score_gaps
from .stats import LineFit, fit_line
from .synthetic import large_radius_sweep

__all__ = ["SelectionConvergence", "selection_convergence"]


@dataclass(frozen=True)
class SelectionConvergence:
    """One input's sweep to the selection limit: per radius ``R`` the distance ``error = ||D_{RX} f - S_X||_2`` and
    ``lip = ||D_{RX} f||_2``; the smallest score gap ``gap`` (``Δ``), the radii of the fit (``tail``: ``ΔR² ≥``
    the threshold) and the line fitted to ``log(error / R²)`` against ``R²`` there, whose slope should be ``-Δ``."""

    radii: Tensor
    error: Tensor
    lip: Tensor
    gap: float
    tail: Tensor
    fit: LineFit

    @property
    def rate(self) -> float:
        """The fitted decay rate: minus the slope of ``log(error / R²)`` against ``R²``."""
        return -float(self.fit.slope)


def selection_convergence(X: Tensor, A: Tensor, V: Tensor, *, masked: bool = False, points: int = 30,
                          top: float = 32.0, tail: float = 8.0) -> SelectionConvergence:
    """Theorem 3.7: the dense Jacobian at ``RX`` against the selection map at ``points`` radii from ``1`` to
    ``sqrt(top / Δ)``, and the rate of ``log(error / R²)`` fitted against ``R²`` where ``ΔR² ≥ tail``.

    ``X`` is one sequence ``(1, n, d)`` with a unique argmax in every row (``Δ > 0``), ``Δ`` its smallest score gap
    (over ``j <= i`` when ``masked``). Dense float64 Jacobians
    (:func:`~lipnb.experiments.synthetic.large_radius_sweep`); not cached (its inputs are tensors).
    """
    check_tokens(X)
    if X.shape[0] != 1:
        raise ValueError(f"X must hold one sequence, shape (1, n, d); got shape {tuple(X.shape)}")
    masked, points = check_bool(masked, "masked"), check_positive_int(points, "points", 3)
    top, tail = float(as_real(top, "top")), float(as_real(tail, "tail"))
    if not 0 < tail < top:
        raise ValueError(f"tail must lie in (0, top); got tail={tail}, top={top}")
    gap = score_gaps(X.double(), A.double(), masked=masked).min().item()
    if not gap > 0 or not math.isfinite(gap):
        raise ValueError(f"X must have a unique argmax in every row (smallest score gap > 0); got {gap}")
    radii = torch.linspace(1, math.sqrt(top / gap), points, dtype=torch.float64)
    sweep = large_radius_sweep(X, A, V, radii, masked=masked)
    error, lip = sweep["error"], sweep["lip"]
    fitted = gap * radii**2 >= tail
    if int(fitted.sum()) < 3:
        raise ValueError("fewer than three radii reach ΔR² >= tail: raise points or top")
    fit = fit_line(radii[fitted] ** 2, (error[fitted] / radii[fitted] ** 2).log())
    return SelectionConvergence(radii, error, lip, gap, fitted, fit)
