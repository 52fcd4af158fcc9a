"""Local Lipschitz constants ``Lip_X(f) = ||D_X f||_2`` (Lemma 3.1, App. E.1 of Castin et al., 2024).

Matrix-free estimates work on the whole batch at once: one forward pass per input builds the
linearization (in closed form for a :class:`Linearizable` map such as
:class:`lipnb.jacobian.MultiHeadMap`, by autograd otherwise), and every step then costs one
Jacobian-vector and one vector-Jacobian product on the inputs that have not converged yet. Batches
larger than the device's memory run in chunks; the solvers themselves are in :mod:`lipnb.krylov`.
Dense float64 Jacobians serve as ground truth on small problems. ``bench/lipschitz.py`` measures all
this against the paper's method.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import memory
from .attention import log_weights
from .checks import all_finite, check_positive_int, check_tokens
from .krylov import KrylovOutcome, NormalOperator, lanczos, normalize, power_iteration

__all__ = [
    "Linearizable",
    "Linearization",
    "LipschitzResult",
    "NotConvergedWarning",
    "exact_local_lipschitz",
    "jacobian_matrix",
    "linearize",
    "local_lipschitz",
    "weighted_operator_norm",
]

Map = Callable[[Tensor], Tensor]


class NotConvergedWarning(UserWarning):
    """Some inputs of a batch did not meet the convergence test within the iteration cap."""


@dataclass(frozen=True)
class LipschitzResult:
    """Per-input estimates of ``||D_X f||_2`` with what is needed to trust them.

    ``value``, ``iterations``, ``converged``, ``residual`` and ``error`` have shape ``(B,)``; ``iterations``
    counts applications of ``JᵀJ`` (one JVP and one VJP each); ``residual`` is
    ``||JᵀJ u - θ u|| / θ`` for the final estimate ``θ = value²`` and unit vector ``u``; ``error`` bounds
    ``||D_X f||_2 / value - 1`` (:func:`lipnb.krylov.value_error`: ``residual / 2``, or its Kato-Temple
    sharpening by the gap for Lanczos);
    ``right_vector`` (``(B, n, d)``) is the unit input direction of fastest change and
    ``left_vector`` (``(B, n, d_out)``) the unit output direction it is sent to;
    ``presolve_iterations`` counts the products of the low-precision first run (zero without one).
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


@dataclass(frozen=True)
class Linearization:
    """``J = D_X f`` at a fixed batch ``X``: ``jvp(u) = J u`` and ``vjp(v) = Jᵀ v``, batched.

    ``select(index)``, when given, returns the linearization at the inputs ``index`` only; it lets
    :func:`local_lipschitz` stop spending products on inputs that have converged.
    """

    output: Tensor
    jvp: Map
    vjp: Map
    select: Callable[[Tensor], Linearization] | None = None


@runtime_checkable
class Linearizable(Protocol):
    """A map ``fn`` that knows its own Jacobian: ``fn.linearize(X)`` returns an object with ``output``,
    ``jvp`` and ``vjp`` (optionally ``select``) like :class:`Linearization`, e.g.
    :class:`lipnb.jacobian.MultiHeadMap` (Lemma C.2 in closed form)."""

    def __call__(self, X: Tensor) -> Tensor: ...

    def linearize(self, X: Tensor) -> Linearization: ...


def _check_output(Y: object, X: Tensor) -> None:
    if not isinstance(Y, Tensor) or Y.dim() != 3 or Y.shape[0] != X.shape[0]:
        shape = tuple(Y.shape) if isinstance(Y, Tensor) else type(Y).__name__
        raise ValueError(f"fn must map (B, n, d) to (B, n', d') with the same B = {X.shape[0]};"
                         f" it returned {shape}")
    if not all_finite(Y):
        raise ValueError("fn returned NaN or inf at X: its local Lipschitz constant is undefined there")


def linearize(fn: Map, X: Tensor) -> Linearization:
    """Record one forward pass of ``fn`` at ``X`` and return reusable JVP and VJP closures.

    A :class:`Linearizable` ``fn`` supplies its own (closed-form) products. Otherwise the JVP is the
    transpose of the VJP, obtained by differentiating the VJP with respect to its (dummy) cotangent,
    so no later product re-runs the forward pass; ``select`` re-linearizes on a sub-batch.
    """
    if isinstance(fn, Linearizable):
        lin = fn.linearize(X)
        _check_output(lin.output, X)
        return lin

    def select(index: Tensor) -> Linearization:
        return linearize(fn, X[index])

    Xg = X.detach().requires_grad_(True)
    # The fused attention kernels have no double backward: record the forward with the math kernel.
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):
        Y = fn(Xg)
        _check_output(Y, X)
        G = torch.zeros_like(Y, requires_grad=True)
        (JtG,) = torch.autograd.grad(Y, Xg, G, create_graph=True, allow_unused=True) if Y.requires_grad \
            else (None,)
        if JtG is None or not JtG.requires_grad:
            # Y does not depend on X (or depends on it affinely with a zero slope): J = 0.
            zero_in, zero_out = torch.zeros_like(X), torch.zeros_like(Y)
            return Linearization(Y.detach(), lambda u: zero_out[: len(u)], lambda v: zero_in[: len(v)], select)

    def jvp(u: Tensor) -> Tensor:
        with torch.enable_grad():
            (Ju,) = torch.autograd.grad(JtG, G, u, retain_graph=True, allow_unused=True)
        return torch.zeros_like(Y) if Ju is None else Ju

    def vjp(v: Tensor) -> Tensor:
        with torch.enable_grad():
            (Jtv,) = torch.autograd.grad(Y, Xg, v, retain_graph=True, allow_unused=True)
        return torch.zeros_like(X) if Jtv is None else Jtv

    return Linearization(Y.detach(), jvp, vjp, select)


PRESOLVE_TOL, PRESOLVE_MAX_ITER = 1e-3, 50
SHARED_TOL, SHARED_MAX_ITER, SHARED_MIX = 1e-2, 20, 0.3


def _shared_start(lin: Linearization, u: Tensor, method: str, low: torch.dtype | None) -> Tensor:
    """Starting vectors ``normalize(v + 0.3 u_b)``: ``v`` the top right singular vector of the chunk's first
    input (residual ``1e-2``, at most 20 products on that input alone, in the presolve dtype if any) and
    ``u_b`` each input's own random vector, so no direction is left out of any input's Krylov space."""
    one = lin.select(torch.zeros(1, dtype=torch.long, device=u.device))
    if low is not None:
        one = one.to(low)
    solver = lanczos if method == "lanczos" else power_iteration
    first = solver(NormalOperator(one, 0.0), u[:1], SHARED_TOL, SHARED_MAX_ITER)
    return normalize(first.vector + SHARED_MIX * u)
CERTIFIED = (torch.float32, torch.float64)


def _check_batch_independence(fn: Map, X: Tensor) -> None:
    """``ValueError`` if ``fn`` mixes batch elements: moving input 0 must leave every other output unchanged.

    One extra forward pass of the first chunk; run for maps differentiated by autograd (a closed form acts
    on each input alone by construction). The move is 1 % of the input's size, so any coupling above the
    rounding level of the outputs shows.
    """
    if len(X) < 2:
        return
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        Y = fn(X)
        _check_output(Y, X)
        moved = X.clone()
        moved[0] += 0.01 * X[0].abs().max().clamp_min(1.0) * torch.randn(
            X[0].shape, generator=torch.Generator(device=X.device).manual_seed(1), device=X.device, dtype=X.dtype)
        Z = fn(moved)
    scale = Y[1:].abs().max().clamp_min(torch.finfo(Y.dtype).tiny)
    change = (Z[1:] - Y[1:]).abs().max() / scale
    if bool(change > 1e3 * torch.finfo(Y.dtype).eps):
        raise ValueError(f"fn mixes the inputs of a batch: moving input 0 changed the other outputs by "
                         f"{float(change):.1e} (relative); local_lipschitz needs a map that acts on each input alone")


def _shrink_ratio(lin: object) -> float:
    """When to shrink a linearization to its active inputs: at once for a closed form (cheap ``select``),
    at half the batch for one that re-linearizes by autograd, never without ``select``."""
    if getattr(lin, "select", None) is None:
        return 0.0
    return 0.5 if isinstance(lin, Linearization) else 1.0


def _presolve_dtype(presolve: torch.dtype | str | None, lin: Linearization, method: str) -> torch.dtype | None:
    """The dtype of the first, low-precision run (see :func:`local_lipschitz`), or ``None``."""
    if presolve is None:
        return None
    dtype = lin.output.dtype
    if presolve == "auto":
        native = dtype == torch.float32 and method == "lanczos" and hasattr(lin, "to")
        return torch.bfloat16 if native and memory.native_bfloat16(lin.output.device) else None
    if not hasattr(lin, "to"):
        raise ValueError("presolve needs a closed-form linearization with .to(dtype) (e.g. lipnb.attention."
                         "MultiHeadMap); pass presolve=None for this map")
    return presolve


def _state_bytes(fn: Map, x: Tensor) -> int:
    """Bytes kept by the linearization of ``fn`` at one input ``x`` ``(1, n, d)``: saved autograd tensors
    and the tensors of a closed-form linearization."""
    storages: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def visit(obj: object) -> None:          # a closed form may hold other linearizations (sub-layers)
        for value in vars(obj).values():
            if isinstance(value, Tensor):
                pack(value)
            elif hasattr(value, "jvp") and hasattr(value, "__dict__"):
                visit(value)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lin = linearize(fn, x)
    visit(lin)
    return sum(storages.values())


def _chunk_size(fn: Map, X: Tensor, vectors: int) -> int:
    """How many inputs to linearize at once: a memory estimate per input (3 copies of the linearization's
    state for the products' temporaries, plus the solver's ``vectors`` vectors) against the budget."""
    B = X.shape[0]
    if B == 1:
        return 1
    per_input = 3 * _state_bytes(fn, X[:1]) + vectors * X[0].numel() * X.element_size()
    return max(1, min(B, memory.memory_budget(X.device) // max(per_input, 1)))


def local_lipschitz(
    fn: Map,
    X: Tensor,
    *,
    method: Literal["lanczos", "power"] = "lanczos",
    tol: float = 1e-6,
    rtol: float | None = None,
    max_iter: int = 200,
    dtype: torch.dtype | None = None,
    presolve: torch.dtype | Literal["auto"] | None = "auto",
    start: Literal["random", "shared"] = "random",
    seed: int = 0,
    detailed: bool = False,
) -> Tensor | LipschitzResult:
    """Lemma 3.1 / App. E.1: ``||D_{X_b} fn||_2`` for every ``b`` of a ``(B, n, d)`` batch, matrix-free.

    ``fn`` maps ``(B, n, d)`` to ``(B, n', d')`` acting on each batch element separately; a
    :class:`Linearizable` ``fn`` (e.g. :class:`lipnb.jacobian.MultiHeadMap`) brings its closed-form
    Jacobian products, any other is differentiated by autograd. ``method`` is ``"lanczos"`` (default)
    or the paper's ``"power"`` iteration, both on ``JᵀJ``; ``tol`` bounds the relative residual of the
    top eigenpair of ``JᵀJ`` and ``max_iter`` the number of products. ``rtol`` (off by default) states the
    accuracy of the value instead: an input also stops, converged, once its value is certified within a
    relative ``rtol`` of ``||D_X f||_2`` (:func:`lipnb.krylov.value_error`; for Lanczos the error of a Ritz
    value is about residual² / gap, so ``rtol=1e-4`` needs far fewer products than ``tol=1e-4``).
    Converged inputs stop costing products; batches too large for the device's memory run in chunks.
    Returns the values ``(B,)``, or a :class:`LipschitzResult` when ``detailed``. Inputs that did not converge raise a
    :class:`NotConvergedWarning` unless ``detailed`` (then see ``converged``).

    ``presolve``: a lower-precision dtype in which a first run of the solver computes the starting
    vectors (vectors in full precision, products in ``presolve``; until its relative residual is below
    ``1e-3``, at most 50 products); the run in full precision then starts from them, and its own test
    alone decides ``value``, ``converged`` and ``residual``. It needs a linearization with
    ``.to(dtype)`` (a closed-form one). ``"auto"`` (default) picks ``bfloat16`` for Lanczos in float32
    on a device with native bfloat16 products (CUDA compute capability 8+, an x86 CPU with AVX512-BF16
    or AMX), and no presolve otherwise.

    ``start``: ``"random"`` (default), each input's own Gaussian starting vector; ``"shared"``, that vector
    mixed (weight 0.3) with the top right singular vector of the first input of each chunk, found first by
    a short run on that input alone: fewer products when the inputs of a batch are alike (e.g. windows of
    one text, whose top directions overlap), the same certificate in any case.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable map (B, n, d) -> (B, n', d'); got {type(fn).__name__}")
    check_tokens(X)
    if method not in ("lanczos", "power"):
        raise ValueError(f"method must be 'lanczos' or 'power'; got {method!r}")
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < tol <= 1:
        raise ValueError(f"tol is a relative residual and must lie in (0, 1] (1: stop at the first product); "
                         f"got {tol!r}")
    if rtol is not None and (isinstance(rtol, bool) or not isinstance(rtol, numbers.Real)):
        raise TypeError(f"rtol must be a real number or None; got {type(rtol).__name__}")
    if rtol is not None and not 0 < rtol < 1:
        raise ValueError(f"rtol is a relative error of the value and must lie in (0, 1); got {rtol!r}")
    max_iter = check_positive_int(max_iter, "max_iter")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int; got {type(seed).__name__}")
    if dtype is not None:
        if not isinstance(dtype, torch.dtype) or dtype not in CERTIFIED:
            raise TypeError(f"dtype must be torch.float32 or torch.float64 (the dtypes whose residual test "
                            f"certifies convergence); got {dtype!r}")
        X = X.to(dtype)
    if not (presolve is None or presolve == "auto"
            or (isinstance(presolve, torch.dtype) and presolve.is_floating_point)):
        raise ValueError(f"presolve must be a floating dtype, 'auto' or None; got {presolve!r}")
    if start not in ("random", "shared"):
        raise ValueError(f"start must be 'random' or 'shared'; got {start!r}")
    X = X.detach()
    probed = isinstance(fn, Linearizable)      # a closed form acts on each input alone by construction
    generator = torch.Generator(device=X.device).manual_seed(seed)
    u0 = normalize(torch.randn(X.shape, generator=generator, device=X.device, dtype=X.dtype))
    solver = lanczos if method == "lanczos" else power_iteration
    vectors = (min(max_iter, 64) if method == "lanczos" else 0) + 8
    chunk = _chunk_size(fn, X, vectors)
    with memory.heap_allocations(X.device):      # batch-sized temporaries reuse freed memory
        parts: list[tuple[KrylovOutcome, Tensor | None, Tensor]] = []
        begin = 0
        while begin < len(X):
            stop = min(begin + chunk, len(X))
            try:
                if not probed:
                    _check_batch_independence(fn, X[begin:stop])
                    probed = True
                lin = linearize(fn, X[begin:stop])
                if lin.output.dtype not in CERTIFIED:
                    raise TypeError(f"fn computes in {lin.output.dtype}: its Jacobian products are too coarse for the "
                                    "residual test to certify convergence; run it in float32 or float64 (a "
                                    "low-precision first run is what presolve is for)")
                u, low = u0[begin:stop], _presolve_dtype(presolve, lin, method)
                if start == "shared" and getattr(lin, "select", None) is not None and len(u) > 1:
                    u = _shared_start(lin, u, method, low if hasattr(lin, "to") else None)
                if low is not None:
                    low_normal = NormalOperator(lin.to(low), _shrink_ratio(lin))
                    first = solver(low_normal, u, PRESOLVE_TOL, min(max_iter, PRESOLVE_MAX_ITER))
                    u, presolved = first.vector, first.iterations
                    del low_normal, first            # its memory serves the full-precision run
                else:
                    presolved = torch.zeros(len(u), dtype=torch.long, device=u.device)
                normal = NormalOperator(lin, _shrink_ratio(lin))
                if not detailed:
                    del lin
                outcome = solver(normal, u, tol, max_iter, rtol)
                left = normalize(lin.jvp(outcome.vector)) if detailed else None
            except (RuntimeError, torch.OutOfMemoryError) as error:
                if not memory.is_oom(error) or chunk == 1:
                    raise
                lin = normal = None
                if X.device.type == "cuda":
                    torch.cuda.empty_cache()
                chunk = max(1, chunk // 2)
                continue
            del normal
            lin = None
            parts.append((outcome, left, presolved))
            begin = stop
    theta = torch.cat([p.theta for p, _, _ in parts])
    converged = torch.cat([p.converged for p, _, _ in parts])
    value = theta.clamp_min(0).sqrt().to(X.dtype)
    if not detailed:
        if not bool(converged.all()):
            bad = int((~converged).sum())
            asked = f"tol={tol}" + ("" if rtol is None else f", rtol={rtol}")
            warnings.warn(f"{bad} of {len(converged)} inputs did not converge in {max_iter} "
                          f"iterations ({asked}); pass detailed=True to inspect them",
                          NotConvergedWarning, stacklevel=2)
        return value
    return LipschitzResult(value=value, iterations=torch.cat([p.iterations for p, _, _ in parts]),
                           converged=converged, residual=torch.cat([p.residual for p, _, _ in parts]),
                           right_vector=torch.cat([p.vector for p, _, _ in parts]),
                           left_vector=torch.cat([v for _, v, _ in parts]), method=method,
                           presolve_iterations=torch.cat([c for _, _, c in parts]),
                           error=torch.cat([p.error for p, _, _ in parts]))


def jacobian_matrix(fn: Map, X: Tensor) -> Tensor:
    """Dense Jacobians ``D_{X_b} fn`` in float64, shape ``(B, n' d', n d)``: ground truth for small inputs.

    Forward mode: basis direction ``j`` of every element at once goes through one JVP of ``fn`` at the
    whole batch, so ``fn`` may close over per-batch data (it must act on each element separately, as
    for :func:`local_lipschitz`). Directions are vectorized with ``torch.func.vmap``, as many at a time
    as the memory budget allows.
    """
    check_tokens(X)
    X = X.detach().double()
    B, n, d = X.shape
    N = n * d
    per_direction = 3 * _state_bytes(fn, X) + 2 * X.numel() * X.element_size()   # also checks fn's output
    chunk = max(1, min(N, memory.memory_budget(X.device) // per_direction))
    basis = torch.eye(N, dtype=X.dtype, device=X.device).view(N, 1, n, d).expand(N, B, n, d)
    with sdpa_kernel(SDPBackend.MATH):          # the fused attention kernels have no forward-mode AD
        columns = torch.func.vmap(lambda t: torch.func.jvp(fn, (X,), (t,))[1], chunk_size=chunk)(basis)
    return columns.detach().reshape(N, B, -1).permute(1, 2, 0)


def exact_local_lipschitz(fn: Map, X: Tensor) -> Tensor:
    """Lemma 3.1: the exact ``||D_{X_b} fn||_2`` from the dense float64 SVD, shape ``(B,)``."""
    return torch.linalg.matrix_norm(jacobian_matrix(fn, X), ord=2)


def weighted_operator_norm(fn: Map, X: Tensor, weights: Tensor) -> Tensor:
    """Lemma C.5: ``||W^{1/2} D_X fn W^{-1/2}||_2`` with ``W = diag(w) ⊗ I``, float64, shape ``(B,)``.

    With ``fn`` the weighted self-attention of Def C.4, this is the local Lipschitz constant of
    mean-field attention at the measure ``sum_i w_i δ_{x_i}`` for the Wasserstein-2 distance.
    """
    check_tokens(X)
    w = log_weights(weights, X.double()).exp().squeeze(1)
    J = jacobian_matrix(fn, X)
    n = X.shape[1]
    root_out = w.sqrt().repeat_interleave(J.shape[1] // n, dim=1)
    root_in = w.sqrt().repeat_interleave(J.shape[2] // n, dim=1)
    return torch.linalg.matrix_norm(root_out.unsqueeze(2) * J / root_in.unsqueeze(1), ord=2)
