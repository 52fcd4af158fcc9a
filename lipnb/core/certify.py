"""The certificate of a Krylov result: its residual recomputed where ``fn`` runs in float64, and the tests on it.

:func:`lipnb.local_lipschitz` runs a solver of :mod:`lipnb.core.krylov` in the linearization's dtype, then
:func:`certify` recomputes the Rayleigh quotient and residual of the returned vectors (with one float64 product
for a float32 run), :func:`passes` applies the stopping test to those numbers, and :func:`repair_misses` runs again
in full precision the inputs of a relaxed run (low-precision products) whose certificate misses the test. A float32
map with no float64 evaluation is certified by :func:`float32_certificate`, under a premise on float32's rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .krylov import KrylovOutcome, NormalOperator, lanczos, normalize, norms, value_error
from .linearization import Linearized

__all__ = [
    "FLOAT32_ULPS",
    "FLOAT64_ULPS",
    "PROBE_FACTOR",
    "Float64At",
    "Solver",
    "certify",
    "float32_certificate",
    "passes",
    "refine_float32_misses",
    "repair_misses",
    "returned_error",
    "solver_targets",
]

# ``fn``'s float64 linearization at some inputs of a chunk (their positions, a long tensor).
Float64At = Callable[[Tensor], Linearized]
# A Krylov solver of lipnb.core.krylov: (operator, starts, tol, max_iter, rtol) -> outcome.
Solver = Callable[[NormalOperator, Tensor, float | None, int, float | None], KrylovOutcome]

# The rounding of a float32 Rayleigh quotient and residual (relative to θ), added to a float32 certificate; and the
# solvers' float32 targets are lowered by it, so that a recomputed certificate still meets them.
FLOAT32_ULPS = 64
# A float32 map with no float64 evaluation: float32's rounding of the product at the returned vector is taken to be
# at most this many times what the two float32 probes of float32_certificate show (the premise it states). Measured
# against dense float64 truth on saturated attention (4,000 results): within 16 times on this CPU's kernels, but one
# result exceeded 16 times by 2.5% on the portable ones (no AVX), so the premise takes twice that.
PROBE_FACTOR = 32
# A float32 map with no float64 evaluation: how many times an input whose certificate misses the test, while the
# solver's own estimate met it, is refined again, each time to a target four times lower.
_REFINE_ROUNDS = 3
# Rounding of a float64 Rayleigh quotient and residual (relative to θ), added to every float64 certificate.
FLOAT64_ULPS = 64


def certify(outcome: KrylovOutcome, normal: NormalOperator, float64: Float64At | None, dtype: torch.dtype,
            size: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(θ, residual, error)`` of the returned vectors, in scaled units: for a float32 run recomputed with one
    float64 product (``float64``: ``size`` inputs at a time, each group linearized in float64 just before its
    product); for a float64 run the solver's own, with ``FLOAT64_ULPS`` units for their rounding."""
    if dtype == torch.float64:
        return outcome.theta, outcome.residual, outcome.error + FLOAT64_ULPS * torch.finfo(dtype).eps
    if float64 is None:
        raise ValueError("a float32 run is certified with a float64 product (or by float32_certificate)")
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


def float32_certificate(outcome: KrylovOutcome, normal: NormalOperator, lin: Linearized,
                        moved: Sequence[Linearized], seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(θ, residual, error)`` of the returned vectors of a float32 map that has no float64 evaluation, in scaled
    units: the float32 product ``M u`` of ``lin`` (the chunk's linearization) recomputed, and two probes of
    float32's rounding of it, both measured in float32: ``Δ_state = max ‖M' u - M u‖``, ``M'`` the product of each
    of ``moved`` (the linearizations at the inputs moved by a few units in their last place, random signs: the
    rounding of what a linearization stores, e.g. a saturated softmax, moves with them; two, as one such move can
    leave that rounding as it was) and ``Δ_arith = ‖M(u + v) - M v -
    M u‖`` for a random unit ``v`` (the products' own rounding: exact arithmetic is linear).

    Premise (stated, tested on saturated attention against dense float64 truth, not proved): the float64
    evaluation's product ``M₆₄ u`` differs from ``M u`` by at most ``PROBE_FACTOR · max(Δ_state, Δ_arith)``. Then
    ``‖M₆₄ u - θ u‖ ≤ ‖M u - θ u‖ + PROBE_FACTOR · max(Δ_state, Δ_arith) = r`` and some eigenvalue of ``M₆₄`` lies
    within ``r`` of ``θ``; ``error`` is :func:`value_error` of that ``r`` plus ``FLOAT32_ULPS`` units for the
    arithmetic of ``θ`` and the norms. Where float32 cannot resolve the product (softmax saturated by large inputs)
    the probes are large, and so is ``error``: the input is then not converged rather than wrong."""
    u = outcome.vector
    scale = normal.scale
    product = NormalOperator(lin, 0.0, scale)
    Mu = product(u)
    theta = torch.linalg.vecdot(u.double().flatten(1), Mu.double().flatten(1))
    residual = norms(Mu.double() - theta.view(-1, *([1] * (u.dim() - 1))) * u.double())
    generator = torch.Generator(device=u.device).manual_seed(seed)
    v = normalize(torch.randn(u.shape, generator=generator, device=u.device, dtype=u.dtype))
    state = torch.stack([norms((NormalOperator(other, 0.0, scale)(u) - Mu).double()) for other in moved]).amax(0)
    arith = norms((product(u + v) - product(v) - Mu).double())
    bound = residual + PROBE_FACTOR * torch.maximum(state, arith)
    error = value_error(theta, bound, FLOAT32_ULPS * torch.finfo(torch.float32).eps)
    return theta, bound / theta.clamp_min(torch.finfo(torch.float64).tiny), error


def refine_float32_misses(solver: Solver, outcome: KrylovOutcome, normal: NormalOperator, lin: Linearized,
                          moved: Sequence[Linearized], seed: int, certified: tuple[Tensor, Tensor, Tensor],
                          asked: tuple[float | None, float | None], max_iter: int) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs of a float32 map with no float64 evaluation whose solver stopped on its own estimate but whose
    certificate misses the test (:func:`float32_certificate` adds its probes of rounding to that estimate) run again
    from their vectors, to a target four times lower, at most ``_REFINE_ROUNDS`` times and within ``max_iter``
    products in all, and are certified again; ``outcome`` is updated in place. An input whose probes alone exceed
    the test stays unconverged: no refinement can certify it."""
    tol, rtol = asked
    target_tol, target_rtol = solver_targets(tol, rtol, torch.float32)
    for _ in range(_REFINE_ROUNDS):
        theta, residual, error = certified
        miss = (outcome.converged & (outcome.iterations < max_iter - 1)
                & ~passes(theta, residual, returned_error(error, torch.float32), tol, rtol))
        if not bool(miss.any()):
            break
        target_tol, target_rtol = (None if t is None else t / 4 for t in (target_tol, target_rtol))
        index = miss.nonzero().squeeze(1)
        budget = int((max_iter - outcome.iterations[index]).min())
        certified = _rerun(index, outcome, normal, lin, certified, outcome.iterations[index],
                           lambda sub, starts, t=target_tol, b=budget, r=target_rtol: solver(sub, starts, t, b, r),
                           lambda again, sub, part, rows: float32_certificate(again, sub, part,
                                                                              [m.select(rows) for m in moved], seed))
    return certified


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
    target_tol, target_rtol = solver_targets(tol, rtol, lin.output.dtype)
    return _rerun(index, outcome, normal, lin, certified, 1,
                  lambda sub, starts: lanczos(sub, starts, target_tol, max(max_iter - 1, 1), target_rtol),
                  lambda again, sub, part, rows: certify(again, sub, lambda at: float64(rows[at]), lin.output.dtype,
                                                         size))


def _rerun(index: Tensor, outcome: KrylovOutcome, normal: NormalOperator, lin: Linearized,
           certified: tuple[Tensor, Tensor, Tensor], spent: Tensor | int,
           solve: Callable[[NormalOperator, Tensor], KrylovOutcome],
           recertify: Callable[[KrylovOutcome, NormalOperator, Linearized, Tensor], tuple[Tensor, Tensor, Tensor]],
           ) -> tuple[Tensor, Tensor, Tensor]:
    """The inputs at ``index`` run again from their vectors (``solve`` on their operator) and certified again
    (``recertify``, given their linearization and ``index``); ``outcome`` is updated in place, its products
    counted from ``spent``."""
    part = lin.select(index)
    sub = NormalOperator(part, 0.0, normal.scale[index])
    again = solve(sub, outcome.vector[index])
    redone = recertify(again, sub, part, index)
    outcome.record(index, again.theta, 0, again.converged, again.residual, again.error, again.vector)
    outcome.iterations[index] = spent + again.iterations
    return tuple(whole.clone().index_put_((index,), new) for whole, new in zip(certified, redone, strict=True))


def solver_targets(tol: float | None, rtol: float | None, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """The solver's targets ``(tol, rtol)``: in float32 lowered by ``FLOAT32_ULPS`` units in the last place (at
    most halved), so the recomputed certificate, which differs from the solver's by rounding, still meets them."""
    if dtype == torch.float64:
        return tol, rtol
    margin = FLOAT32_ULPS * torch.finfo(torch.float32).eps
    return tuple(None if t is None else max(t - 2 * margin, t / 2) for t in (tol, rtol))
