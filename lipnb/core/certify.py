"""The certificate of a Krylov result: its residual recomputed where ``fn`` runs in float64, and the tests on it.

:func:`lipnb.local_lipschitz` runs a solver of :mod:`lipnb.core.krylov` in the linearization's dtype, then
:func:`certify` recomputes the Rayleigh quotient and residual of the returned vectors (with one float64 product
for a float32 run), :func:`passes` applies the stopping test to those numbers, and :func:`repair_misses` runs again
in full precision the inputs of a relaxed run (low-precision products) whose certificate misses the test.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .krylov import KrylovOutcome, NormalOperator, lanczos, normalize, norms, value_error
from .linearization import Linearized

__all__ = ["FLOAT32_ULPS", "FLOAT64_ULPS", "Float64At", "certify", "passes", "repair_misses", "returned_error",
           "solver_targets"]

# ``fn``'s float64 linearization at some inputs of a chunk (their positions, a long tensor).
Float64At = Callable[[Tensor], Linearized]

# A float32 map that cannot run in float64 is certified at float32's level: its products are taken to be exact
# to this many units in the last place of θ (a premise, stated in local_lipschitz).
FLOAT32_ULPS = 64
# Rounding of a float64 Rayleigh quotient and residual (relative to θ), added to every float64 certificate.
FLOAT64_ULPS = 64


def certify(outcome: KrylovOutcome, normal: NormalOperator, float64: Float64At | None, dtype: torch.dtype,
            size: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(θ, residual, error)`` of the returned vectors, in scaled units: recomputed with one float64 product for a
    float32 run when ``float64`` is given (``size`` inputs at a time, each group linearized in float64 just before
    its product), else the solver's own (a float32-only map's ``error`` gains ``FLOAT32_ULPS`` units in the last
    place of float32)."""
    if dtype == torch.float64 or float64 is None:
        rounding = (FLOAT64_ULPS if dtype == torch.float64 else FLOAT32_ULPS) * torch.finfo(dtype).eps
        return outcome.theta, outcome.residual, outcome.error + rounding
    u = normalize(outcome.vector.double())
    theta, absolute = torch.empty(2, len(u), dtype=torch.float64, device=u.device)
    positions = torch.arange(len(u), device=u.device)
    for begin in range(0, len(u), size):
        rows = slice(begin, begin + size)
        Mu = NormalOperator(float64(positions[rows]), 0.0, normal.scale[rows])(u[rows])
        theta[rows] = torch.linalg.vecdot(u[rows].flatten(1), Mu.flatten(1))
        absolute[rows] = norms(Mu - theta[rows].view(-1, *([1] * (u.dim() - 1))) * u[rows])
    error = value_error(theta, absolute, FLOAT64_ULPS * torch.finfo(torch.float64).eps)
    return theta, absolute / theta.clamp_min(torch.finfo(torch.float64).tiny), error


def returned_error(error: Tensor, dtype: torch.dtype) -> Tensor:
    """``error`` of a value returned in ``dtype``: a value cast to float32 gains its rounding."""
    return error if dtype == torch.float64 else error + torch.finfo(dtype).eps


def passes(theta: Tensor, residual: Tensor, error: Tensor, tol: float | None, rtol: float | None) -> Tensor:
    """The stopping test on certified numbers: relative residual at most ``tol`` (when given), else ``error`` at
    most ``rtol``; a zero Jacobian passes."""
    return ((residual <= tol) if tol is not None else (error <= rtol)) | (theta <= 0)


def repair_misses(outcome: KrylovOutcome, normal: NormalOperator, lin: Linearized, float64: Float64At,
                   certified: tuple[Tensor, Tensor, Tensor], asked: tuple[float | None, float | None, torch.dtype],
                   max_iter: int, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs whose relaxed refinement stopped but whose certificate misses the test run again from their
    vectors with every product in full precision (at most ``max_iter - 1`` after the refinement's first, so
    ``max_iter`` caps the full-precision products), and are certified again; ``outcome`` is updated in place."""
    theta, residual, error = certified
    tol, rtol, dtype = asked
    miss = outcome.converged & ~passes(theta, residual, returned_error(error, dtype), tol, rtol)
    if not bool(miss.any()):
        return certified
    index = miss.nonzero().squeeze(1)
    sub = NormalOperator(lin.select(index), 0.0, normal.scale[index])
    target_tol, target_rtol = solver_targets(tol, rtol, lin.output.dtype)
    again = lanczos(sub, outcome.vector[index], target_tol, max(max_iter - 1, 1), target_rtol)
    redone = certify(again, sub, lambda rows: float64(index[rows]), lin.output.dtype, size)
    outcome.record(index, again.theta, 0, again.converged, again.residual, again.error, again.vector)
    outcome.iterations[index] = 1 + again.iterations
    theta, residual, error = (whole.clone().index_put_((index,), part) for whole, part in zip(certified, redone,
                                                                                              strict=True))
    return theta, residual, error


def solver_targets(tol: float | None, rtol: float | None, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """The solver's targets ``(tol, rtol)``: in float32 lowered by ``FLOAT32_ULPS`` units in the last place (at
    most halved), so the recomputed certificate, which differs from the solver's by rounding, still meets them."""
    if dtype == torch.float64:
        return tol, rtol
    margin = FLOAT32_ULPS * torch.finfo(torch.float32).eps
    return tuple(None if t is None else max(t - 2 * margin, t / 2) for t in (tol, rtol))
