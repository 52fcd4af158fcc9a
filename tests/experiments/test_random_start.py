"""The random-start failure bounds (:mod:`lipnb.experiments.random_start`): the Monte Carlo count of the
estimator's Lanczos failures agrees with an independent dense Lanczos from independent starts, and the power
iteration's failure frequency with its exact probability on a two-point spectrum; both stay below the bounds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import betainc

from lipnb import local_lipschitz
from lipnb.experiments import random_start

F64 = torch.float64


def _dense_lanczos_failures(lam: np.ndarray, k: int, eps: float, starts: int, seed: int) -> int:
    """Failures of the top Ritz value of the k-dimensional Krylov space (orthonormalised explicitly, in the
    eigenbasis of diag(lam)), from uniform starts of numpy's own generator."""
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((starts, len(lam)))
    basis = np.stack([b * lam**j for j in range(k)], axis=2)                   # (starts, N, k)
    Q, _ = np.linalg.qr(basis)
    T = np.einsum("sni,n,snj->sij", Q, lam, Q)
    return int((np.linalg.eigvalsh(T)[:, -1] < 1 - eps).sum())


def test_estimator_lanczos_failures_match_a_dense_lanczos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same spectrum, same k and ε: the frequencies agree within five binomial standard deviations, and both
    lie below the bound (here about 0.30)."""
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    starts = 4096
    table = random_start.random_start_failures(((3, 0.4),), n=4, d=8, starts=starts)
    ours = int(table["failures"][0]) / starts
    lam = random_start.chebyshev_spectrum(32, 0.4).numpy()
    theirs = _dense_lanczos_failures(lam, 3, 0.4, starts, seed=1) / starts
    sigma = math.sqrt(theirs * (1 - theirs) / starts * 2)
    assert 0.05 < theirs and abs(ours - theirs) < 5 * sigma
    bound = float(table["bound"][0])
    assert bound == pytest.approx(math.sqrt(2 / math.pi) * math.sqrt(31) / math.cosh(5 * math.atanh(math.sqrt(0.4))))
    assert max(ours, theirs) < bound < 1


def test_power_failures_match_the_exact_probability_and_its_bound() -> None:
    """On ``JᵀJ`` with eigenvalues 1 and λ (N - 1 times) the power iteration's Rayleigh quotient after k products
    fails exactly when ``c₁² < a / (1 + a)``, ``a = λ^(2k-2) (1 - ε - λ) / ε``: the estimator's frequency matches
    that Beta probability, which lies below the power bound."""
    N, k, eps = 32, 3, 0.5
    lam = (2 * k - 2) * (1 - eps) / (2 * k - 1)                   # the λ that maximises a
    a = lam ** (2 * k - 2) * (1 - eps - lam) / eps
    exact = betainc(0.5, (N - 1) / 2, a / (1 + a))
    bound = float(random_start.power_failure_bound(N, k, eps))
    assert 0.1 < exact <= bound < 1
    W = torch.diag(torch.tensor([1.0] + [lam] * (N - 1), dtype=F64).sqrt())
    fn = lambda Z: (Z.flatten(1) @ W).view(Z.shape)                              # noqa: E731
    starts = 8192
    result = local_lipschitz(fn, torch.zeros(starts, 4, 8, dtype=F64), method="power", max_iter=k, tol=1e-300,
                             detailed=True, seed=3)
    frequency = float((result.value.square() < 1 - eps).double().mean())
    assert abs(frequency - exact) < 5 * math.sqrt(exact * (1 - exact) / starts)


def test_the_lanczos_bound_sits_below_the_published_one() -> None:
    """``√(2/π) √(N-1) / cosh(...) ≤ 1.648 √N e^(-(2k-1)√ε)`` over a grid (the published constant), for N ≥ 3."""
    k, eps = np.meshgrid(np.arange(1, 300), np.linspace(1e-6, 1 - 1e-6, 400))
    for N in (3, 64, 49152, 10**7):
        ratio = random_start.lanczos_failure_bound(N, k, eps) / (1.648 * math.sqrt(N) * np.exp(-(2 * k - 1)
                                                                                            * np.sqrt(eps)))
        assert ratio.max() < 1
        ours = math.log(random_start.power_failure_bound(N, 1, 0.5) / math.sqrt(0.5))      # (1 - ε)^(k-1/2) apart
        assert ours < math.log(0.824 * math.sqrt(N))
