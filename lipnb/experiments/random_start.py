"""How often a Krylov method misses the top from a random start: the failure bounds this book derives (after
Kuczyński & Woźniakowski's method, chapter *A probability instead of a premise*) and a Monte Carlo count of
:func:`lipnb.local_lipschitz`'s failures on a spectrum close to the worst case.

With ``λ₁ = 1`` the top eigenvalue of ``JᵀJ`` (size ``N``), ``k`` products and a start uniform on the sphere,
``P(θ_k < (1 - ε) λ₁)`` is at most :func:`lanczos_failure_bound` for Lanczos and :func:`power_failure_bound` for
the power iteration, for every ``N ≥ 3``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress

__all__ = ["chebyshev_spectrum", "lanczos_failure_bound", "power_failure_bound", "random_start_failures"]

# The constant of the start's first coordinate: P(c₁² < s) ≤ √(2/π) √(N - 1) √s.
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def lanczos_failure_bound(N: int, k: int | np.ndarray, eps: float | np.ndarray) -> np.ndarray:
    """``√(2/π) √(N - 1) / cosh((2k - 1) artanh √ε)``: the probability that ``k`` Lanczos products from a uniform
    start leave the top Ritz value below ``(1 - ε) λ₁``, at most (every spectrum, ``N ≥ 3``)."""
    k, eps = np.asarray(k, dtype=float), np.asarray(eps, dtype=float)
    y = (2 * k - 1) * np.arctanh(np.sqrt(eps))
    return _SQRT_2_OVER_PI * math.sqrt(N - 1) * 2 * np.exp(-y) / (1 + np.exp(-2 * y))     # 1 / cosh y, no overflow


def power_failure_bound(N: int, k: int | np.ndarray, eps: float | np.ndarray) -> np.ndarray:
    """``√(2/π) √(N - 1) (1 - ε)^(k - 1/2)``: the same for the power iteration's Rayleigh quotient after ``k``
    products (every spectrum, ``N ≥ 3``)."""
    k, eps = np.asarray(k, dtype=float), np.asarray(eps, dtype=float)
    return _SQRT_2_OVER_PI * math.sqrt(N - 1) * (1 - eps) ** (k - 0.5)


def chebyshev_spectrum(N: int, eps: float) -> Tensor:
    """Eigenvalues ``(N,)`` float64: ``1``, then ``N - 1`` Chebyshev nodes of ``[0, 1 - ε]`` (the arcsine law on
    which the Chebyshev polynomials of the bound are extremal): a spectrum close to Lanczos's worst case."""
    j = torch.arange(N - 1, dtype=torch.float64)
    rest = (1 - eps) * (1 + torch.cos(math.pi * (j + 0.5) / (N - 1))) / 2
    return torch.cat([torch.ones(1, dtype=torch.float64), rest])


def random_start_failures(cases: tuple[tuple[int, float], ...] = ((3, 0.4), (6, 0.25), (6, 0.4)), *, n: int = 8,
                          d: int = 8, starts: int = 65536, seed: int = 0) -> ResultTable:
    """For each ``(k, ε)`` of ``cases``: how many of ``starts`` random starts leave :func:`lipnb.local_lipschitz`'s
    Lanczos value, after ``k`` products, below ``√(1 - ε)`` times the norm, on the linear map of ``R^{n d}`` whose
    ``JᵀJ`` has the :func:`chebyshev_spectrum`, beside :func:`lanczos_failure_bound` (cached)."""
    params = {"cases": [list(c) for c in cases], "n": n, "d": d, "starts": starts, "seed": seed}
    N = n * d

    def compute() -> dict[str, list]:
        g = torch.Generator().manual_seed(seed)
        Q = [torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64)) for _ in range(2)]
        U, V = (q * torch.sign(torch.diagonal(r)) for q, r in Q)
        columns: dict[str, list] = {"k": [], "eps": [], "starts": [], "failures": [], "bound": []}
        for k, eps in progress(cases, "random-start failures", len(cases)):
            W = (U * chebyshev_spectrum(N, eps).sqrt()) @ V.T

            def fn(Z: Tensor, W: Tensor = W) -> Tensor:
                return (Z.flatten(1) @ W.T).view(Z.shape)

            failures, chunk = 0, 8192
            for c in range(math.ceil(starts / chunk)):
                X = torch.zeros(min(chunk, starts - c * chunk), n, d, dtype=torch.float64)
                result = local_lipschitz(fn, X, detailed=True, max_iter=k, tol=1e-300, seed=seed + c)
                failures += int((result.value.square() < 1 - eps).sum())
            columns["k"].append(k)
            columns["eps"].append(eps)
            columns["starts"].append(starts)
            columns["failures"].append(failures)
            columns["bound"].append(float(lanczos_failure_bound(N, k, eps)))
        return columns

    return cached_table("random_start_failures", params, compute)
