"""Batched eigen-solvers for the top of ``JᵀJ``: the paper's power iteration (App. E.1) and Lanczos.

Each row of a ``(B, ...)`` tensor is one input's vector; every input stops on its own test, and finished
inputs leave the batch so later products only pay for the active ones. :mod:`lipnb.lipschitz` builds the
linearizations and calls these solvers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

__all__ = [
    "KrylovOutcome",
    "Linearized",
    "NormalOperator",
    "batched_dot",
    "fill_holes",
    "lanczos",
    "normalize",
    "norms",
    "power_iteration",
    "value_error",
]


class Linearized(Protocol):
    """What the solvers need of a linearization: its output, the two products and ``select``."""

    output: Tensor

    def jvp(self, u: Tensor) -> Tensor: ...

    def vjp(self, v: Tensor) -> Tensor: ...

    def select(self, index: Tensor) -> Linearized: ...


def batched_dot(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.vecdot(a.flatten(1), b.flatten(1))


def norms(v: Tensor) -> Tensor:
    """Euclidean norm of each row of ``v``, summed in cascade like ``sum``: torch's float32 ``vector_norm``
    on CPU accumulates sequentially and is off by ~1e-5 at ``n d ~ 2e5`` (pytorch/pytorch#169237)."""
    return batched_dot(v, v).sqrt()


def normalize(v: Tensor) -> Tensor:
    norm = norms(v).clamp_min(torch.finfo(v.dtype).tiny)
    return v / norm.view(-1, *([1] * (v.dim() - 1)))


class NormalOperator:
    """``u -> JᵀJ u`` on the still-active inputs of a chunk, each a row of ``u``.

    Rows of finished inputs are dropped with :meth:`keep`; the linearization itself is shrunk (``select``)
    once at most ``shrink_ratio`` of its batch is still active (1 for a cheap closed-form ``select``, 0.5
    for one that re-linearizes, 0 for none); until then finished inputs get zero vectors, which change
    nothing.
    """

    def __init__(self, lin: Linearized, shrink_ratio: float) -> None:
        self.lin = lin
        self.dtype = lin.output.dtype
        self.rows = torch.arange(len(lin.output), device=lin.output.device)
        self.size = len(self.rows)
        self.ratio = shrink_ratio

    def __call__(self, u: Tensor) -> Tensor:
        """``JᵀJ u`` in the linearization's dtype, returned in ``u``'s. A strided ``u`` (a row of the Lanczos
        basis) is made contiguous first: matrix products fold a contiguous ``(B, n, d)`` into one large
        matrix product and a strided one into a batched product, which cost more than the copy here."""
        if len(self.rows) == self.size:
            return self.lin.vjp(self.lin.jvp(u.to(self.dtype).contiguous())).to(u.dtype)
        full = u.new_zeros(self.size, *u.shape[1:], dtype=self.dtype)
        full[self.rows] = u.to(self.dtype)
        return self.lin.vjp(self.lin.jvp(full))[self.rows].to(u.dtype)

    def keep(self, rows: Tensor) -> None:
        """Keep the active rows ``rows`` (a mask, or positions in the new order)."""
        self.rows = self.rows[rows]
        if 0 < len(self.rows) <= self.ratio * self.size:
            self.lin = self.lin.select(self.rows)
            self.rows = torch.arange(len(self.rows), device=self.rows.device)
            self.size = len(self.rows)


@dataclass
class KrylovOutcome:
    """Per-input results of one chunk, filled in as inputs finish."""

    theta: Tensor
    iterations: Tensor
    converged: Tensor
    residual: Tensor
    error: Tensor
    vector: Tensor

    @classmethod
    def empty(cls, u: Tensor) -> KrylovOutcome:
        B = len(u)
        theta = torch.zeros(B, dtype=torch.float64, device=u.device)
        return cls(theta, torch.zeros(B, dtype=torch.long, device=u.device),
                   torch.zeros(B, dtype=torch.bool, device=u.device), torch.full_like(theta, torch.inf),
                   torch.full_like(theta, torch.inf), torch.zeros_like(u))

    def record(self, index: Tensor, theta: Tensor, iterations: int, converged: Tensor, residual: Tensor,
               error: Tensor, vector: Tensor) -> None:
        self.theta[index] = theta
        self.iterations[index] = iterations
        self.converged[index] = converged
        self.residual[index] = residual
        self.error[index] = error
        self.vector[index] = vector


_TINY = torch.finfo(torch.float64).tiny
# The second Ritz pair bounds the rest of the spectrum (Kato-Temple) only from the third Lanczos step on and
# once its own residual is below 2% of the gap between the top two Ritz values. Looser trust pays on easy
# problems but certifies wrong values on small random ones (tests/test_lipschitz.py); see value_error.
GAP_TRUST = 0.02
MIN_GAP_STEPS = 3


def value_error(theta: Tensor, residual: Tensor, below: Tensor | None = None, rounding: float = 0.0) -> Tensor:
    """A bound on the relative error of ``σ = √θ`` as an estimate of ``√λ₁``, from the top Ritz pair's
    absolute residual ``r = ||Mu - θu||`` (all ``(B,)``, float64).

    ``θ ≤ λ₁`` (Rayleigh) and an eigenvalue lies within ``r`` of ``θ``, so ``λ₁ - θ ≤ r``. When ``below``
    bounds the other eigenvalues from above and ``below < θ``, the Kato-Temple inequality sharpens this to
    ``λ₁ - θ ≤ r² / (θ - below)``. Then ``√(λ₁/θ) - 1 ≤ (λ₁ - θ) / (2θ)``. Both premises are those of any
    Krylov certificate: the eigenvalue found near ``θ`` is the top one, and none was missed above ``below``.
    ``rounding`` (relative) is added for the arithmetic: the solvers pass 16 units in the last place of
    their vectors' dtype, the level at which float32 values scatter around the float64 ones.
    """
    gap_bound = residual.clone()
    if below is not None:
        gap = theta - below
        quadratic = residual.square() / gap.clamp_min(_TINY)
        gap_bound = torch.where(gap > 0, torch.minimum(gap_bound, quadratic), gap_bound)
    return gap_bound / (2 * theta.clamp_min(_TINY)) + rounding


def _stops(res: Tensor, error: Tensor, tol: float, rtol: float | None) -> Tensor:
    """Each input's test: relative residual at most ``tol``, or (with ``rtol``) value error at most ``rtol``."""
    return (res <= tol) if rtol is None else (res <= tol) | (error <= rtol)


def power_iteration(normal: NormalOperator, u: Tensor, tol: float, max_iter: int,
                    rtol: float | None = None) -> KrylovOutcome:
    """App. E.1: ``u <- JᵀJ u / ||JᵀJ u||``, each input stopped when its residual is below ``tol`` or (with
    ``rtol``) when the residual bounds the value's relative error by ``rtol`` (:func:`value_error`, no gap)."""
    out = KrylovOutcome.empty(u)
    index = torch.arange(len(u), device=u.device)
    for it in range(1, max_iter + 1):
        Mu = normal(u)
        th = batched_dot(u, Mu).double()
        absolute = norms(Mu - th.to(u.dtype).view(-1, 1, 1) * u).double()
        res = absolute / th.clamp_min(_TINY)
        error = value_error(th, absolute, rounding=16 * torch.finfo(u.dtype).eps)
        converged = _stops(res, error, tol, rtol) | (th <= 0)
        stop = converged | (it == max_iter)
        if bool(stop.any()):
            out.record(index[stop], th[stop], it, converged[stop], res[stop], error[stop], u[stop])
            keep = ~stop
            if not bool(keep.any()):
                break
            index, u, Mu = index[keep], u[keep], Mu[keep]
            normal.keep(keep)
        u = normalize(Mu)
    return out


def fill_holes(keep: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Compaction that moves few rows: ``perm[j]`` is the old row of new row ``j``; kept rows stay in
    place, except the kept rows beyond the new size (``movers``), which fill the finished rows (``holes``)."""
    size = int(keep.sum())
    position = torch.arange(len(keep), device=keep.device)
    holes = position[:size][~keep[:size]]
    movers = position[size:][keep[size:]]
    perm = position[:size].clone()
    perm[holes] = movers
    return perm, holes, movers


def lanczos(normal: NormalOperator, u: Tensor, tol: float, max_iter: int, rtol: float | None = None) -> KrylovOutcome:
    """Lanczos on ``JᵀJ`` with full reorthogonalisation, batched; stops each input on its own.

    The top Ritz value ``θ`` never exceeds ``||J||²``; an input stops when the residual of its top
    Ritz pair, ``β_k |s_k|``, is at most ``tol θ``, when its Krylov space is invariant, or (with ``rtol``)
    when :func:`value_error` bounds the relative error of ``√θ`` by ``rtol``, the other eigenvalues
    being bounded by the second Ritz value plus its own residual (Kato-Temple). Finished inputs leave
    the batch, so later steps only pay for the active ones.
    """
    out = KrylovOutcome.empty(u)
    shape = u.shape[1:]
    N = u[0].numel()
    m = min(max_iter, N)
    index = torch.arange(len(u), device=u.device)
    basis = u.new_empty(len(u), min(m, 32), N)                  # (b, capacity, N), grown on demand
    basis[:, 0] = normalize(u).flatten(1)
    alpha = u.new_zeros(len(u), m, dtype=torch.float64)
    beta = u.new_zeros(len(u), m, dtype=torch.float64)
    eps = torch.finfo(u.dtype).eps
    for k in range(m):
        q = basis[:, k]
        w = normal(q.view(-1, *shape)).flatten(1)
        a = batched_dot(q, w)
        w.addcmul_(a.unsqueeze(1), q, value=-1)
        if k > 0:
            w.addcmul_(beta[:, k - 1].to(w.dtype).unsqueeze(1), basis[:, k - 1], value=-1)
        V = basis[:, : k + 1]
        # The three-term recurrence above removed the large components; one classical Gram-Schmidt
        # pass against the whole basis removes the rounding errors, a second one runs only where the
        # first removed most of w (the "twice is enough" test of Daniel, Gragg, Kaufman and Stewart).
        # The norm before a pass is sqrt(b² + |h|²), h the removed coefficients (V is orthonormal).
        for _ in range(2):
            h = torch.bmm(w.unsqueeze(1), V.mT)
            w = torch.baddbmm(w.unsqueeze(1), h, V, alpha=-1).squeeze(1)
            b = norms(w)
            if not bool((b.square() < 0.5 * (b.square() + h.square().sum((1, 2)))).any()):
                break
        alpha[:, k], beta[:, k] = a.double(), b.double()
        T = torch.diag_embed(alpha[:, : k + 1]) + torch.diag_embed(beta[:, :k], 1) \
            + torch.diag_embed(beta[:, :k], -1)
        evals, evecs = torch.linalg.eigh(T)
        th, s = evals[:, -1], evecs[:, :, -1]
        ritz_residuals = beta[:, k : k + 1] * evecs[:, -1].abs()          # ||M y_i - θ_i y_i||, each pair
        res = ritz_residuals[:, -1] / th.clamp_min(_TINY)
        below = None
        if k >= MIN_GAP_STEPS - 1:
            settled = ritz_residuals[:, -2] <= GAP_TRUST * (th - evals[:, -2])
            below = torch.where(settled, evals[:, -2] + ritz_residuals[:, -2], th)
        error = value_error(th, ritz_residuals[:, -1], below, 16 * eps)
        invariant = beta[:, k] <= 1e3 * eps * th.clamp_min(0)
        converged = _stops(res, error, tol, rtol) | invariant | (th <= 0)
        stop = converged | (k + 1 == m)
        if bool(stop.any()):
            # Gathering the basis rows of the finished inputs copies them: when most finish, combine every
            # row's basis in place and keep the finished rows' vectors.
            if 2 * int(stop.sum()) > len(stop):
                vec = torch.bmm(s.to(w.dtype).unsqueeze(1), V).squeeze(1)[stop]
            else:
                vec = torch.bmm(s[stop].to(w.dtype).unsqueeze(1), V[stop]).squeeze(1)
            out.record(index[stop], th[stop], k + 1, converged[stop], res[stop], error[stop],
                       normalize(vec).view(-1, *shape))
            keep = ~stop
            if not bool(keep.any()):
                break
            # Shrink the basis in place: kept rows beyond the new size move into the holes left by
            # finished ones; no copy of the whole basis.
            perm, holes, movers = fill_holes(keep)
            if len(holes):
                basis[holes, : k + 1] = basis[movers, : k + 1]
            basis = basis[: len(perm)]
            index, alpha, beta, w, b = index[perm], alpha[perm], beta[perm], w[perm], b[perm]
            normal.keep(perm)
        if k + 1 == basis.shape[1]:
            grown = basis.new_empty(len(basis), min(2 * (k + 1), m), N)
            grown[:, : k + 1] = basis
            basis = grown
        torch.div(w, b.clamp_min(torch.finfo(w.dtype).tiny).unsqueeze(1), out=basis[:, k + 1])
    return out
