"""Local Lipschitz constants ``Lip_X(f) = ||D_X f||_2`` (Lemma 3.1, App. E.1 of Castin et al., 2024).

Matrix-free estimates work on the whole batch at once: one forward pass per input builds the
linearization (:mod:`lipnb.core.linearization`: in closed form for a map such as
:class:`lipnb.core.jacobian.MultiHeadMap`, by autograd otherwise), and every step then costs one
Jacobian-vector and one vector-Jacobian product on the inputs that have not converged yet. Batches
larger than the device's memory run in chunks; the solvers themselves are in :mod:`lipnb.core.krylov`.
Dense float64 Jacobians, the ground truth on small problems, are in :mod:`lipnb.core.dense`.
``bench/lipschitz.py`` measures all this against the paper's method.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..arguments import check_bool, check_positive_int, check_seed, check_tokens
from . import memory
from .certify import (
    Float64At,
    certify,
    float32_certificate,
    passes,
    refine_float32_misses,
    repair_misses,
    returned_error,
    solver_targets,
)
from .krylov import NormalOperator, lanczos, normalize, power_iteration, upper_bound
from .linearization import Linearizable, Linearization, Linearized, linearization_bytes, linearize
from .map_checks import check_map, check_same_map
from .starts import PRESOLVE_MAX_ITER, presolved_starts, random_starts
from .widening import float32_scatter, float64_candidates, nudged

__all__ = ["LipschitzResult", "NotConvergedWarning", "local_lipschitz"]

Map = Callable[[Tensor], Tensor]


class NotConvergedWarning(UserWarning):
    """Some inputs of a batch did not meet the convergence test within the iteration cap."""


@dataclass(frozen=True)
class LipschitzResult:
    """Per-input estimates of ``||D_X f||_2`` with what is needed to trust them (all ``(B,)`` but the vectors).

    ``value`` is ``√θ``, ``θ`` the Rayleigh quotient of ``JᵀJ`` at ``right_vector`` ``u`` (``(B, n, d)``, unit):
    a lower bound on ``||D_X f||_2`` up to rounding. ``residual`` is ``||JᵀJu - θu|| / θ`` (float64, recomputed
    with a float64 product for a float32 run where ``fn`` runs in float64). ``error`` bounds, with no premise,
    the relative distance ``|σ - value| / value`` from ``value`` to the nearest singular value ``σ`` of
    ``D_X f`` (:func:`lipnb.core.krylov.value_error`, plus rounding); under the one premise that this singular value
    is the largest (no Krylov method can check that nothing above was missed) it bounds
    ``| ||D_X f||_2 / value - 1 |``. ``converged``: the stopping test (``tol`` or ``rtol``) held on these
    recomputed numbers. ``iterations`` counts full-precision applications of ``JᵀJ`` (one JVP and one VJP each),
    ``presolve_iterations`` those in the presolve's low precision (its first run's and a relaxed refinement's,
    see :func:`local_lipschitz`; zero without a presolve); ``left_vector``
    (``(B, n, d_out)``) is the unit output direction ``J u / ||J u||``. ``upper`` (only with ``confidence=δ``,
    else ``None``): ``value ≤ ||D_X f||_2 ≤ upper`` with probability at least ``1 - δ`` over the random start,
    no other premise (Kuczyński & Woźniakowski, 1992); ``inf`` where too few products were made to claim anything.
    """

    value: Tensor
    iterations: Tensor
    converged: Tensor
    residual: Tensor
    right_vector: Tensor
    left_vector: Tensor
    method: str
    presolve_iterations: Tensor
    error: Tensor
    upper: Tensor | None = None


# The smallest relative residual asked (tol, or 2 rtol) for which the refinement after a presolve makes its later
# products in the presolve's dtype: their rounding, scaled by the small corrections they compute, stays below it.
RELAXED_RESIDUAL = 1e-4
# On a CPU the certificate linearizes a chunk in float64 a few inputs at a time, each group's state under this
# size: glibc's allocator reuses freed blocks up to 32 MiB, larger ones are mapped afresh, page by page, each time.
CERTIFY_BYTES = 16 << 20
CERTIFIED = (torch.float32, torch.float64)
DEFAULT_RTOL = 1e-4


def _shrink_ratio(lin: Linearized) -> float:
    """When to shrink a linearization to its active inputs, as it declares (``shrinks``); one that declares
    nothing is never shrunk."""
    return float(getattr(lin, "shrinks", 0.0))


def _casts(lin: Linearized) -> bool:
    """Whether a linearization runs its products in another dtype, as it declares (``casts``)."""
    return bool(getattr(lin, "casts", False))


def _presolve_dtype(presolve: torch.dtype | str | None, lin: Linearization, method: str) -> torch.dtype | None:
    """The dtype of the first, low-precision run (see :func:`local_lipschitz`), or ``None``."""
    if presolve is None:
        return None
    dtype = lin.output.dtype
    if presolve == "auto":
        native = dtype == torch.float32 and method == "lanczos" and _casts(lin)
        return torch.bfloat16 if native and memory.native_bfloat16(lin.output.device) else None
    if not _casts(lin):
        raise ValueError("presolve needs a linearization that casts its products (casts = True: a closed form "
                         "such as lipnb.core.jacobian.MultiHeadMap's); pass presolve=None for this map")
    return presolve


def _chunk_sizes(fn: Map, X: Tensor, vectors: int) -> tuple[int, int]:
    """How many inputs to linearize at once: in ``X``'s dtype, a memory estimate per input (3 copies of the
    linearization's state for the products' temporaries, plus the solver's ``vectors`` vectors) against the
    budget; in float64 for the certificate on a CPU, as many as keep that linearization under
    :data:`CERTIFY_BYTES` (elsewhere the whole chunk)."""
    B = X.shape[0]
    if B == 1:
        return 1, 1
    state = linearization_bytes(fn, X[:1])
    per_input = 3 * state + vectors * X[0].numel() * X.element_size()
    chunk = max(1, min(B, memory.memory_budget(X.device) // max(per_input, 1)))
    if X.device.type != "cpu":
        return chunk, chunk
    return chunk, max(1, min(chunk, CERTIFY_BYTES // max(state * 8 // X.element_size(), 1)))


def _float64_map(fn: Map, x: Tensor) -> tuple[Map, Tensor, bool] | None:
    """The map that evaluates ``fn`` in float64, its output at ``x.double()`` (one input) and whether lipnb made it
    (:func:`lipnb.core.widening._promoted`): the first of :func:`lipnb.core.widening.float64_candidates` whose output
    there is float64, else ``None``."""
    for wide, made in float64_candidates(fn):
        try:
            output = linearize(wide, x.double()).output
        except (RuntimeError, TypeError, ValueError):     # e.g. a module with float32 weights refuses float64 inputs
            continue
        if output.dtype == torch.float64:
            return wide, output, made
    return None


def _float64_at(wide: Map, X: Tensor, output: Tensor, scatter: float) -> Float64At:
    """The float64 linearization at the inputs ``index`` of the chunk ``X``, its output checked against the
    working linearization's (``output``) there: ``fn`` in float64 must be the map that was linearized."""
    def at(index: Tensor) -> Linearized:
        lin64 = linearize(wide, X[index].double())
        check_same_map(lin64.output, output[index], "the float64 linearization's output", scatter)
        return lin64
    return at


def _linearized(fn: Map, X: Tensor) -> Linearized:
    """``fn``'s linearization at ``X``, refused where its products are too coarse to certify anything."""
    lin = linearize(fn, X)
    if lin.output.dtype not in CERTIFIED:
        raise TypeError(f"fn computes in {lin.output.dtype}: its Jacobian products are too coarse for the residual "
                        "test to certify convergence; run it in float32 or float64 (a low-precision first run is "
                        "what presolve is for)")
    return lin


def _checked(fn: Map, X: Tensor) -> tuple[Linearized, tuple[Map, Tensor] | None, float]:
    """The first chunk's linearization, ``fn``'s float64 evaluation (float32 runs; ``None`` where there is none)
    and float32's scatter of ``fn``'s output, after checking that ``fn`` is deterministic and acts on each input
    alone (:func:`lipnb.core.map_checks.check_map`; a closed form on its first input), that the linearization's
    output is ``fn``'s and that the float64 evaluation's is too, up to rounding estimated from float32 alone
    (:func:`lipnb.core.widening.float32_scatter`, never from the discrepancy being checked). A float64 evaluation
    that lipnb made (:func:`lipnb.core.widening._promoted`) and that computes another map is dropped (the float32
    certificate applies); one that ``fn`` itself computes, or names, is a ``ValueError``."""
    closed = isinstance(fn, Linearizable)
    Y = check_map(fn, X[:1] if closed else X, mixing=not closed)
    lin = _linearized(fn, X)
    if lin.output.dtype != torch.float32:
        check_same_map(lin.output[:len(Y)], Y, "the linearization's output")
        return lin, None, 0.0
    scatter = float32_scatter(fn, X[:1], Y[:1])
    check_same_map(lin.output[:len(Y)], Y, "the linearization's output", scatter)
    wide = _float64_map(fn, X[:1])
    if wide is not None:
        try:
            check_same_map(wide[1], Y[:1], "the float64 evaluation's output", scatter)
        except ValueError:
            if not wide[2]:
                raise
            wide = None
    return lin, None if wide is None else wide[:2], scatter


def _check_arguments(tol: object, rtol: object, max_iter: object, seed: object, confidence: object, method: str,
                     start: str, detailed: object) -> int:
    """Every argument of :func:`local_lipschitz` but ``fn``, ``X``, ``dtype`` and ``presolve``; returns ``seed``."""
    if method not in ("lanczos", "power"):
        raise ValueError(f"method must be 'lanczos' or 'power'; got {method!r}")
    for name, value in (("tol", tol), ("rtol", rtol), ("confidence", confidence)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"{name} must be a real number or None; got {type(value).__name__}")
    if tol is not None and rtol is not None:
        raise ValueError("give tol (a relative residual) or rtol (a relative error of the value), not both")
    if tol is not None and not 0 < tol <= 1:
        raise ValueError(f"tol is a relative residual and must lie in (0, 1] (1: stop at the first product); "
                         f"got {tol!r}")
    if rtol is not None and not 0 < rtol < 1:
        raise ValueError(f"rtol is a relative error of the value and must lie in (0, 1); got {rtol!r}")
    if confidence is not None and not 0 < confidence < 1:
        raise ValueError(f"confidence is a failure probability δ and must lie in (0, 1); got {confidence!r}")
    check_positive_int(max_iter, "max_iter")
    check_bool(detailed, "detailed")
    if start == "shared":
        raise ValueError("start='shared' was withdrawn: a start built from another input's top direction can converge"
                         " to a lower singular value where a random start finds the top; use start='mixed' (that "
                         "direction plus random noise) or start='random'")
    if start not in ("mixed", "random"):
        raise ValueError(f"start must be 'random' or 'mixed'; got {start!r}")
    return check_seed(seed)


def local_lipschitz(
    fn: Map,
    X: Tensor,
    *,
    method: Literal["lanczos", "power"] = "lanczos",
    tol: float | None = None,
    rtol: float | None = None,
    max_iter: int = 200,
    dtype: torch.dtype | None = None,
    presolve: torch.dtype | Literal["auto"] | None = "auto",
    start: Literal["mixed", "random"] = "mixed",
    seed: int = 0,
    detailed: bool = False,
    confidence: float | None = None,
) -> Tensor | LipschitzResult:
    """Lemma 3.1 / App. E.1: ``||D_{X_b} fn||_2`` for every ``b`` of a ``(B, n, d)`` batch, matrix-free.

    ``fn`` maps ``(B, n, d)`` to ``(B, n', d')`` acting on each batch element separately and
    deterministically (checked on the first chunk, :func:`lipnb.core.map_checks.check_map`: two evaluations, and for
    an autograd map a moved input and the first input alone; a sub-batch re-linearized is checked too); a
    :class:`lipnb.core.linearization.Linearizable` ``fn`` (e.g. :class:`lipnb.core.jacobian.MultiHeadMap`)
    brings its closed-form Jacobian products (its output is checked against ``fn(X)``), any other is
    differentiated by autograd.
    ``method`` is ``"lanczos"`` (default) or the paper's ``"power"`` iteration, both on ``JᵀJ`` (rescaled by a
    power of two per input, so tiny and huge Jacobians neither underflow nor overflow).

    Stopping: with ``rtol`` an input stops, converged, once ``error ≤ rtol`` (see :class:`LipschitzResult`:
    the value is then within ``rtol`` of ``||D_X f||_2`` under the premise that the eigenvalue found is the top
    one, i.e. nothing above was missed); with ``tol`` once the relative residual ``||JᵀJu - θu|| / θ ≤ tol``;
    neither given means ``rtol=1e-4``; both is a ``ValueError``. ``max_iter`` caps the products. For a float32
    run the final residual and Rayleigh quotient are recomputed with one float64 product of ``fn``'s float64
    linearization, and ``converged`` is decided on them: ``fn``'s float64 evaluation is the map a ``float64_map()``
    method names, ``fn`` itself where it runs in float64, or, for an autograd map, ``fn`` with every float32 tensor
    it uses cast to float64 (:func:`lipnb.core.widening._promoted`), each checked to compute ``fn``. A float32 map
    with none (a closed form that refuses float64) is certified by
    :func:`lipnb.core.certify.float32_certificate`, under its stated premise on float32's rounding. Returns the
    values ``(B,)``, or a :class:`LipschitzResult` when ``detailed``; inputs that did not converge raise a
    :class:`NotConvergedWarning` unless ``detailed`` (then see ``converged``).

    ``confidence`` (a failure probability ``δ`` in (0, 1), off by default) adds ``upper`` to the result:
    ``value ≤ ||D_X f||_2 ≤ upper`` with probability at least ``1 - δ`` over the random start (Kuczyński &
    Woźniakowski, 1992; :func:`lipnb.core.krylov.failure_epsilon`). It needs the value to come from the Krylov space
    of the random start, so it runs without presolve, from random starts. A zero product from a random start
    makes ``upper`` 0: a nonzero Jacobian vanishes on a random vector with probability zero.

    ``presolve``: a lower-precision dtype in which a first run of the solver computes the starting
    vectors (until its relative residual is below ``1e-3``, at most 50 products); the run in full precision
    then starts from them. Where a float64 product certifies (``fn`` runs in float64) and the residual asked
    is at least ``1e-4`` (``tol``, or ``2 rtol``: the default's), that run is relaxed
    (:func:`lipnb.core.krylov.lanczos`): its first product, of the start, is made in full precision and the
    later ones, which only compute corrections as small as the start's residual, in the presolve's dtype.
    Either way the recomputed residual of the returned vectors alone decides ``value``, ``converged`` and
    ``error`` (an input whose certificate misses the test after a relaxed run runs again in full precision),
    so a poor start or a coarse product costs time, never accuracy. It needs a
    linearization with ``.to(dtype)`` (a closed-form one). ``"auto"`` (default) picks ``bfloat16`` for Lanczos
    in float32 on a device with native bfloat16 products (CUDA compute capability 8+, an x86 CPU with
    AVX512-BF16 or AMX), and no presolve otherwise.

    ``start``: ``"random"``, each input's own Gaussian vector (seeded by ``seed``); ``"mixed"`` (default), where a
    presolve runs, the first input presolves alone from its random start and every other input starts from that
    vector plus its own random start of twice its weight (:mod:`lipnb.core.starts`): where the inputs' top
    directions are alike it saves products, and its chance of missing the top is at most 1.5 times the worst-case
    bound of a random start (derived there); without a presolve it is ``"random"``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable map (B, n, d) -> (B, n', d'); got {type(fn).__name__}")
    check_tokens(X)
    seed = _check_arguments(tol, rtol, max_iter, seed, confidence, method, start, detailed)
    if tol is None and rtol is None:
        rtol = DEFAULT_RTOL
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or dtype not in CERTIFIED:
            raise TypeError(f"dtype must be torch.float32 or torch.float64 (the dtypes whose residual test "
                            f"certifies convergence); got {dtype!r}")
        X = X.to(dtype)
    if not (presolve is None or presolve == "auto"
            or (isinstance(presolve, torch.dtype) and presolve.is_floating_point)):
        raise ValueError(f"presolve must be a floating dtype, 'auto' or None; got {presolve!r}")
    if confidence is not None:
        presolve, start = None, "random"
    X = X.detach()
    u0 = random_starts(X, seed)
    solver = lanczos if method == "lanczos" else power_iteration
    vectors = (min(max_iter, 64) if method == "lanczos" else 0) + 8
    chunk, wide_chunk = _chunk_sizes(fn, X, vectors)
    parts: list[tuple[Tensor, ...]] = []
    begin, wide, scatter, top = 0, None, None, None
    while begin < len(X):
        stop = min(begin + chunk, len(X))
        try:
            if scatter is None:
                lin, wide, scatter = _checked(fn, X[begin:stop])
            else:
                lin = _linearized(fn, X[begin:stop])
            float64 = None if wide is None else _float64_at(wide[0], X[begin:stop], lin.output, scatter)
            u, low = u0[begin:stop], _presolve_dtype(presolve, lin, method)
            lin_low = None if low is None else lin.to(low)
            if lin_low is not None:
                u, presolved, top = presolved_starts(solver, lin_low, _shrink_ratio(lin), u, top,
                                                     min(max_iter, PRESOLVE_MAX_ITER), start == "mixed")
            else:
                presolved = torch.zeros(len(u), dtype=torch.long, device=u.device)
            # Relaxed refinement: only its first product in full precision, the float64 product certifies.
            relaxed = (lin_low is not None and float64 is not None and method == "lanczos"
                       and (2 * rtol if tol is None else tol) >= RELAXED_RESIDUAL)
            if not relaxed:
                lin_low = None                   # its memory serves the full-precision run
            normal = NormalOperator(lin, _shrink_ratio(lin), low=lin_low)
            target_tol, target_rtol = solver_targets(tol, rtol, lin.output.dtype)
            if relaxed:
                outcome = lanczos(normal, u, target_tol, max_iter, target_rtol, relaxed=True)
                presolved = presolved + outcome.iterations - 1
                outcome.iterations = outcome.iterations.clamp_max(1)
            else:
                outcome = solver(normal, u, target_tol, max_iter, target_rtol)
            if lin.output.dtype == torch.float32 and float64 is None:
                moved = [linearize(fn, nudged(X[begin:stop], seed=probe)) for probe in (2, 3)]
                theta, residual, error = refine_float32_misses(
                    solver, outcome, normal, lin, moved, seed, float32_certificate(outcome, normal, lin, moved, seed),
                    (tol, rtol), max_iter)
                del moved
            else:
                theta, residual, error = certify(outcome, normal, float64, lin.output.dtype, wide_chunk)
            if relaxed:
                theta, residual, error = repair_misses(outcome, normal, lin, float64, (theta, residual, error),
                                                        (tol, rtol, X.dtype), max_iter, wide_chunk)
            left = normalize(lin.jvp(outcome.vector)) if detailed else None
        except (RuntimeError, torch.OutOfMemoryError) as oom:
            if not memory.is_oom(oom) or chunk == 1:
                raise
            lin = float64 = normal = None
            if X.device.type == "cuda":
                torch.cuda.empty_cache()
            chunk = max(1, chunk // 2)
            continue
        error = returned_error(error, X.dtype)
        converged = outcome.converged & passes(theta, residual, error, tol, rtol)
        upper = None
        if confidence is not None:
            upper = upper_bound(confidence, X[0].numel(), outcome, theta, method, lin.output.dtype) / normal.scale
        value = theta.clamp_min(0).sqrt() / normal.scale
        parts.append((value, outcome.iterations, converged, residual, outcome.vector, left, presolved, error, upper))
        lin = float64 = normal = None
        begin = stop
    value, iterations, converged, residual, right, left, presolved, error, upper = (
        None if p[0] is None else torch.cat(p) for p in zip(*parts, strict=True))
    value = value.to(X.dtype)
    if not detailed:
        if not bool(converged.all()):
            bad = int((~converged).sum())
            asked = f"rtol={rtol}" if tol is None else f"tol={tol}"
            warnings.warn(f"{bad} of {len(converged)} inputs did not converge in {max_iter} "
                          f"iterations ({asked}); pass detailed=True to inspect them",
                          NotConvergedWarning, stacklevel=2)
        return value
    return LipschitzResult(value=value, iterations=iterations, converged=converged, residual=residual,
                           right_vector=right, left_vector=left, method=method, presolve_iterations=presolved,
                           error=error, upper=upper if confidence is not None else None)
