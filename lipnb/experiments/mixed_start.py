"""The mixed start and what it costs in certainty (chapter *A start borrowed from another input*): the tail of one
coordinate of a uniform start (its closed form and its concavity, the lemma behind the price), and the estimator's
Lanczos misses at a planted crossing, where the borrowed vector is this input's second singular vector, from mixed,
random and shared starts, beside the random-start bound.

A mixed start is ``w + τ g`` (normalised): ``w`` a unit vector found for another input, ``g`` this input's own
start, uniform on the sphere and independent of ``w``. Its chance of missing the top is at most ``(1 + τ)/τ`` times
the random-start bound (:func:`lipnb.experiments.random_start.lanczos_failure_bound`), whatever ``w`` is; the shared
start, ``w`` alone, has no such bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import betainc
from scipy.stats import hypergeom
from torch import Tensor

from ..arguments import check_positive_int
from ..core.krylov import NormalOperator, lanczos
from ..core.linearization import linearize
from ..core.starts import NOISE_WEIGHT, failure_factor, mixed_starts, random_starts
from ..results import ResultTable, cached_table, progress
from .random_start import chebyshev_spectrum, lanczos_failure_bound

__all__ = ["NOISE_WEIGHT", "SubsampleGap", "concavity_ratios", "coordinate_tail", "crossing_failures",
           "mixed_start_factor", "subsample_gap"]

def mixed_start_factor(tau: float = NOISE_WEIGHT) -> float:
    """``(1 + τ)/τ``: the factor by which the random-start failure bounds hold for a mixed start of weight ``τ``."""
    return failure_factor(tau)


def coordinate_tail(N: int, t: float | np.ndarray) -> np.ndarray:
    """``F(t) = P(|⟨g, v⟩| ≤ t)`` for ``g`` uniform on the unit sphere of ``R^N`` and a unit ``v``, in closed form:
    ``⟨g, v⟩²`` follows the Beta law of parameters ``1/2`` and ``(N - 1)/2``, so ``F(t)`` is the regularised
    incomplete Beta function at ``min(t, 1)²`` (``0`` for ``t ≤ 0``)."""
    t = np.clip(np.asarray(t, dtype=float), 0.0, 1.0)
    return betainc(0.5, (N - 1) / 2, t**2)


def concavity_ratios(Ns: tuple[int, ...] = (3, 4, 16, 64, 128 * 384), a: np.ndarray | None = None,
                     t: np.ndarray | None = None) -> np.ndarray:
    """For each ``N`` of ``Ns``, the largest ``F(a t) / (a F(t))`` over a grid of ``a ≥ 1`` and ``t > 0``
    (:func:`coordinate_tail`): at most one where ``F`` is concave with ``F(0) = 0``."""
    a = np.linspace(1.0, 20.0, 400) if a is None else np.asarray(a, dtype=float)
    t = np.logspace(-8, 0, 800) if t is None else np.asarray(t, dtype=float)
    A, T = np.meshgrid(a, t)
    return np.array([np.max(coordinate_tail(N, A * T) / (A * coordinate_tail(N, T))) for N in Ns])


def _misses(W: Tensor, u: Tensor, k: int, eps: float) -> int:
    """How many of the unit starts ``u`` (``(S, n, d)``) leave the estimator's Lanczos value of the linear map
    ``W`` (``‖W‖₂ = 1``) below ``√(1 - ε)`` after ``k`` products."""
    def fn(Z: Tensor) -> Tensor:
        return (Z.flatten(1) @ W.T).view(Z.shape)

    normal = NormalOperator(linearize(fn, torch.zeros_like(u)), 0.0)
    outcome = lanczos(normal, u, 1e-300, k)
    value2 = outcome.theta.clamp_min(0) / normal.scale.square()
    return int((value2 < 1 - eps).sum())


def crossing_failures(cases: tuple[tuple[int, float], ...] = ((3, 0.4), (6, 0.25), (6, 0.4)),
                      taus: tuple[float, ...] = (NOISE_WEIGHT,), *, n: int = 8, d: int = 8, starts: int = 16384,
                      seed: int = 0) -> ResultTable:
    """For each ``(k, ε)`` of ``cases``, on the linear map of ``R^{n d}`` whose ``JᵀJ`` has the
    :func:`lipnb.experiments.random_start.chebyshev_spectrum` (a spectrum close to Lanczos's worst case): how many
    of ``starts`` starts leave the estimator's Lanczos value, after ``k`` products, below ``√(1 - ε)`` times the
    norm, for the estimator's random starts (``"random"``), the mixed starts of each ``τ`` of ``taus`` built on the
    map's *second* right singular vector (the crossing: another input's top direction is this input's second), and
    that vector alone (``"shared"``, ``τ = 0``), beside the random-start bound and ``(1 + τ)/τ`` times it (cached)."""
    params = {"cases": [list(c) for c in cases], "taus": list(taus), "n": n, "d": d, "starts": starts, "seed": seed}
    N = n * d

    def compute() -> dict[str, list]:
        g = torch.Generator().manual_seed(seed)
        Q = [torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64)) for _ in range(2)]
        U, V = (q * torch.sign(torch.diagonal(r)) for q, r in Q)
        second = V[:, 1].reshape(1, n, d)                      # the second right singular vector: σ₂² = 1 - ε nearly
        columns: dict[str, list] = {"k": [], "eps": [], "start": [], "tau": [], "starts": [], "failures": [],
                                    "bound": [], "allowed": []}
        kinds = [("random", math.inf), *(("mixed", tau) for tau in taus), ("shared", 0.0)]
        for k, eps in progress(cases, "crossing failures", len(cases)):
            W = (U * chebyshev_spectrum(N, eps).sqrt()) @ V.T
            bound = float(lanczos_failure_bound(N, k, eps))
            for kind, tau in kinds:
                failures, chunk = 0, 8192
                for c in range(math.ceil(starts / chunk)):
                    X = torch.zeros(min(chunk, starts - c * chunk), n, d, dtype=torch.float64)
                    g_c = random_starts(X, seed + c)
                    u = {"random": g_c, "shared": second.expand_as(X)}.get(kind)
                    failures += _misses(W, mixed_starts(g_c, second, tau) if u is None else u, k, eps)
                factor = {"random": 1.0, "shared": math.inf}.get(kind) or mixed_start_factor(tau)
                for name, value in (("k", k), ("eps", eps), ("start", kind), ("tau", tau), ("starts", starts),
                                    ("failures", failures), ("bound", bound), ("allowed", factor * bound)):
                    columns[name].append(value)
        return columns

    return cached_table("mixed_start_crossing_failures", params, compute)


@dataclass(frozen=True)
class SubsampleGap:
    """Where a subsample's miss count lies against its share of the whole count (:func:`subsample_gap`)."""

    expected: float  # the misses the subsample holds on average
    sd: float        # one standard deviation of its miss count
    gap: float       # (its miss count - expected) / sd


def subsample_gap(misses: int, starts: int, total_misses: int, total_starts: int) -> SubsampleGap:
    """How far the ``misses`` among the first ``starts`` of ``total_starts`` exchangeable starts, of which
    ``total_misses`` miss, lie from their share, in standard deviations: given the whole count, the subsample's count
    is hypergeometric (``total_starts`` starts, ``total_misses`` misses, ``starts`` drawn)."""
    total_starts = check_positive_int(total_starts, "total_starts", 2)
    starts = check_positive_int(starts, "starts")
    total_misses = check_positive_int(total_misses, "total_misses")
    misses = check_positive_int(misses, "misses", 0)
    if not starts < total_starts:
        raise ValueError(f"subsample_gap: a subsample has fewer starts than the whole ({starts} of {total_starts})")
    if total_misses >= total_starts:
        raise ValueError(f"subsample_gap: the whole count needs a start that does not miss ({total_misses} misses "
                         f"of {total_starts})")
    if misses > min(starts, total_misses) or starts - misses > total_starts - total_misses:
        raise ValueError(f"subsample_gap: {misses} misses in {starts} starts cannot be drawn from {total_misses} "
                         f"misses in {total_starts}")
    law = hypergeom(total_starts, total_misses, starts)
    expected, sd = float(law.mean()), float(law.std())
    return SubsampleGap(expected, sd, (misses - expected) / sd)
