"""Batched eigen-solvers for the top of ``JᵀJ``: the paper's power iteration (App. E.1) and Lanczos.

Each row of a ``(B, ...)`` tensor is one input's vector; every input stops on its own test, and finished
inputs leave the batch so later products only pay for the active ones. :mod:`lipnb.core.lipschitz` builds the
linearizations and calls these solvers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .linearization import Linearized

__all__ = [
    "KrylovOutcome",
    "NormalOperator",
    "batched_dot",
    "failure_epsilon",
    "fill_holes",
    "interval_products",
    "lanczos",
    "normalize",
    "norms",
    "power_iteration",
    "upper_bound",
    "value_error",
]


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
    """``u -> c² JᵀJ u`` on the still-active inputs of a chunk (rows of ``u``), ``c`` a power of two per input.

    ``c`` (:attr:`scale`, by the chunk's original rows) is set at the first product so that ``c ||J u||`` is
    about 1: ``JᵀJ`` of a Jacobian of norm ``1e-23`` (float32) or ``1e-200`` (float64) neither underflows
    nor overflows, and powers of two change no digit. Rows of finished inputs are dropped with
    :meth:`keep`; the linearization itself is shrunk (``select``) once at most ``shrink_ratio`` of its batch
    is still active (1 for a cheap closed-form ``select``, 0.5 for one that re-linearizes, 0 for none);
    until then finished inputs get zero vectors, which change nothing. ``low``, when given, is a low-precision
    twin of the linearization: ``normal(u, low=True)`` multiplies with it (the relaxed :func:`lanczos`), and
    :meth:`keep` shrinks both.
    """

    def __init__(self, lin: Linearized, shrink_ratio: float, scale: Tensor | None = None,
                 low: Linearized | None = None) -> None:
        self.lin, self.low = lin, low
        self.rows = torch.arange(len(lin.output), device=lin.output.device)
        self.origin, self.total = self.rows.clone(), len(self.rows)
        self.size = len(self.rows)
        self.ratio = shrink_ratio
        self.scale = scale

    def _set_scale(self, Ju: Tensor) -> None:
        size = Ju.flatten(1).abs().amax(1).double()        # the largest entry: its square cannot under- or overflow
        exponent = torch.where(size > 0, -torch.log2(size.clamp_min(_TINY)).round(), torch.zeros_like(size))
        self.scale = torch.ones(self.total, dtype=torch.float64, device=Ju.device)
        self.scale[self.origin] = torch.exp2(exponent.clamp(-1000, 1000))

    def __call__(self, u: Tensor, low: bool = False) -> Tensor:
        """``c² JᵀJ u`` in the linearization's dtype (in the twin ``low``'s when ``low``), returned in ``u``'s. A
        strided ``u`` (a row of the Lanczos basis) is made contiguous first: matrix products fold a contiguous
        ``(B, n, d)`` into one large matrix product and a strided one into a batched product, which cost more
        than the copy here."""
        lin = self.low if low else self.lin
        dtype = lin.output.dtype
        full = len(self.rows) == self.size
        if full:
            x = u.to(dtype).contiguous()
        else:
            x = u.new_zeros(self.size, *u.shape[1:], dtype=dtype)
            x[self.rows] = u.to(dtype)
        Ju = lin.jvp(x)
        if self.scale is None:
            self._set_scale(Ju if full else Ju[self.rows])
        c = self.scale[self.origin].to(dtype)
        if not full:
            c = torch.zeros(self.size, dtype=dtype, device=u.device).index_copy_(0, self.rows, c)
        view = (-1, *([1] * (Ju.dim() - 1)))
        out = lin.vjp(Ju * c.view(view))           # not in place: a jvp may return its argument (identity)
        out = out.mul_(c.view(-1, *([1] * (out.dim() - 1))))
        return (out if full else out[self.rows]).to(u.dtype)

    def keep(self, rows: Tensor) -> None:
        """Keep the active rows ``rows`` (a mask, or positions in the new order)."""
        self.rows, self.origin = self.rows[rows], self.origin[rows]
        if 0 < len(self.rows) <= self.ratio * self.size:
            self.lin = self.lin.select(self.rows)
            self.low = None if self.low is None else self.low.select(self.rows)
            self.rows = torch.arange(len(self.rows), device=self.rows.device)
            self.size = len(self.rows)


@dataclass
class KrylovOutcome:
    """Per-input results of one chunk, filled in as inputs finish: ``theta`` is the top Ritz value of the rescaled
    ``c² JᵀJ`` (:class:`NormalOperator`), ``scale`` its ``c``, so ``sigma = √θ / c`` estimates ``||J||₂``."""

    theta: Tensor
    iterations: Tensor
    converged: Tensor
    residual: Tensor
    error: Tensor
    vector: Tensor
    scale: Tensor | None = None

    @property
    def sigma(self) -> Tensor:
        return self.theta.clamp_min(0).sqrt() / self.scale

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
# Kuczyński & Woźniakowski (1992), Theorems 4.1-4.2: worst case over spectra of the probability that k products
# from a start uniform on the unit sphere of R^N leave the estimate more than ε (relative) below λ₁.
KW_LANCZOS, KW_POWER = 1.648, 0.824


def value_error(theta: Tensor, residual: Tensor, rounding: float = 0.0) -> Tensor:
    """Relative distance from ``√θ`` to the nearest singular value, from the Ritz pair's absolute residual ``r``.

    Some eigenvalue ``λ`` of the symmetric ``JᵀJ`` lies within ``r = ||JᵀJu - θu||`` of ``θ`` (no premise), so
    ``|√λ - √θ| / √θ ≤ 1 - √(max(1 - r/θ, 0))`` (1 when ``r ≥ θ``). If that ``λ`` is ``λ₁`` (nothing above it
    was missed: the one premise no Krylov method checks) this bounds ``| ||J||₂ / √θ - 1 |``. ``rounding``
    (relative) is added for the arithmetic that computed ``θ`` and ``r``. All ``(B,)``, float64.
    """
    ratio = residual / theta.clamp_min(_TINY)
    bound = 1 - (1 - ratio).clamp_min(0).sqrt()
    bound = torch.where(residual <= 0, torch.zeros_like(bound), torch.where(theta > 0, bound, torch.ones_like(bound)))
    return bound + rounding


def failure_epsilon(delta: float, N: int, k: Tensor | int, method: str = "lanczos") -> Tensor:
    """Kuczyński & Woźniakowski (1992): the ``ε`` with ``P(θ_k < (1 - ε) λ₁) ≤ δ`` after ``k`` products.

    From a start uniform on the unit sphere of ``R^N``, worst case over symmetric positive semi-definite
    matrices: Lanczos ``P ≤ 1.648 √N e^{-√ε (2k - 1)}``, power ``P ≤ 0.824 √N (1 - ε)^{k - 1/2}``; solved
    for ``ε`` at ``P = δ`` (clamped to ``[0, 1]``; ``1`` claims nothing). ``k`` counts the products whose
    Krylov space the estimate ``θ_k`` is the best (Lanczos) or last (power) Rayleigh quotient of.
    """
    k = torch.as_tensor(k, dtype=torch.float64)
    if method == "lanczos":
        root = math.log(KW_LANCZOS * math.sqrt(N) / delta) / (2 * k - 1).clamp_min(1)
        eps = root.clamp_min(0).square()
    else:
        log_keep = math.log(delta / (KW_POWER * math.sqrt(N))) / (k - 0.5).clamp_min(0.5)
        eps = 1 - log_keep.clamp_max(0).exp()
    return torch.where(k >= 1, eps, torch.ones_like(eps)).clamp(0, 1)


def upper_bound(delta: float, N: int, outcome: KrylovOutcome, theta: Tensor, method: str,
                dtype: torch.dtype) -> Tensor:
    """``upper`` of :func:`lipnb.local_lipschitz` in scaled units, ``(B,)``: the largest of the certified and the
    solver's Ritz values over ``1 - ε`` (:func:`failure_epsilon` after the products made), square-rooted, with 64
    units of ``dtype`` for rounding; 0 where that Ritz value is 0 (a random start's product vanishes on a nonzero
    Jacobian with probability zero); ``inf`` where too few products were made to claim anything."""
    eps = failure_epsilon(delta, N, outcome.iterations, method)
    top = torch.maximum(theta, outcome.theta)
    upper = top.sqrt() / (1 - eps).sqrt() * (1 + 64 * torch.finfo(dtype).eps)
    return torch.where(top > 0, upper, torch.zeros_like(upper))


def interval_products(delta: float, N: int, eta: float) -> int:
    """The fewest Lanczos products after which :func:`failure_epsilon` (at ``delta``, on ``R^N``) brings the
    interval's upper end within a relative ``eta`` of the value: ``ε ≤ 1 - (1 + η)^-2``, i.e.
    ``k ≥ (1 + ln(1.648 √N / δ) / √ε) / 2``."""
    if not (0 < delta < 1 and eta > 0 and N >= 1):
        raise ValueError(f"interval_products: need 0 < delta < 1, eta > 0, N >= 1; got {delta}, {eta}, {N}")
    eps = 1 - (1 + eta) ** -2
    return math.ceil((1 + math.log(KW_LANCZOS * math.sqrt(N) / delta) / math.sqrt(eps)) / 2)


def _stops(res: Tensor, error: Tensor, tol: float | None, rtol: float | None) -> Tensor:
    """Each input's test: relative residual at most ``tol`` (when given), else value error at most ``rtol``."""
    return (res <= tol) if tol is not None else (error <= rtol)


def power_iteration(normal: NormalOperator, u: Tensor, tol: float | None, max_iter: int,
                    rtol: float | None = None) -> KrylovOutcome:
    """App. E.1: ``u <- JᵀJ u / ||JᵀJ u||``, each input stopped when its relative residual is at most ``tol``
    (when given) or else when :func:`value_error` is at most ``rtol``."""
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
    out.scale = normal.scale
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


def lanczos(normal: NormalOperator, u: Tensor, tol: float | None, max_iter: int,
            rtol: float | None = None, relaxed: bool = False) -> KrylovOutcome:
    """Lanczos on ``JᵀJ`` with full reorthogonalisation, batched; stops each input on its own.

    The top Ritz value ``θ`` never exceeds ``||J||²``; an input stops when the residual of its top
    Ritz pair, ``β_k |s_k|``, is at most ``tol θ`` (when ``tol`` is given) or else when :func:`value_error`
    is at most ``rtol``, or when its Krylov space is invariant. Finished inputs leave the batch, so later
    steps only pay for the active ones.

    ``relaxed`` (inexact Lanczos, Simoncini 2005): the first product, of the start ``u``, is made in full
    precision and every later one with the operator's low-precision twin (``normal.low``). From a start close
    to the top eigenvector, the Ritz vector is ``u`` plus corrections of the size of ``u``'s residual, so the
    later products' rounding enters it scaled by that size; the first row of the tridiagonal matrix comes from
    the accurate product alone. The recurrence's residual is then an estimate, not a bound: the caller must
    recompute the returned vectors' residual with an accurate product (:func:`lipnb.local_lipschitz` does).
    ``iterations`` counts all products.
    """
    if relaxed and normal.low is None:
        raise ValueError("lanczos(relaxed=True) needs an operator with a low-precision twin (NormalOperator(low=...))")
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
        w = normal(q.view(-1, *shape), low=relaxed and k > 0).flatten(1)
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
        absolute = beta[:, k] * s[:, -1].abs()                        # ||M y - θ y|| of the top Ritz pair
        res = absolute / th.clamp_min(_TINY)
        error = value_error(th, absolute, 16 * eps)
        invariant = beta[:, k] <= 64 * eps * th.clamp_min(0)             # at the rounding level
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
    out.scale = normal.scale
    return out
