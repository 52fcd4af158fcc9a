"""The rounding inside a float64 certificate, measured: the Rayleigh quotient and residual that
:func:`lipnb.local_lipschitz` reports for its returned vector, against the same two numbers computed in extended
precision from the dense float64 Jacobian, on the float64 problems of the certificate audit
(:mod:`lipnb.experiments.certificate`).

The certificate adds a fixed allowance for that rounding (64 units in float64's last place); this measures how
much of it the maps of the audit use.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..core.dense import jacobian_matrix
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress
from .certificate import BATCH, problem_suite

__all__ = ["certificate_rounding_audit", "extended_rayleigh"]

# The settings measured: the default call, a tight residual, and the paper's power iteration.
CALLS: tuple[dict[str, object], ...] = ({}, {"tol": 1e-10}, {"method": "power", "tol": 1e-6})


def extended_rayleigh(J: Tensor, u: Tensor) -> tuple[float, float]:
    """``(θ, ||JᵀJu - θu||)`` of the unit vector along ``u`` for the matrix ``J`` ``(m, N)``, computed in numpy's
    extended precision (``longdouble``: 64-bit significand on x86) from ``J`` and ``u`` as given."""
    Jl = J.detach().cpu().numpy().astype(np.longdouble)
    ul = u.detach().cpu().flatten().numpy().astype(np.longdouble)
    ul = ul / np.sqrt((ul * ul).sum())
    Mu = Jl.T @ (Jl @ ul)
    theta = (ul * Mu).sum()
    residual = np.sqrt(((Mu - theta * ul) ** 2).sum())
    return theta, residual


def certificate_rounding_audit(count: int = 160, *, seed: int = 0) -> ResultTable:
    """Per input and setting of :data:`CALLS` on the float64 problems among the first ``count`` inputs of the audit:
    ``|θ - θ*| / θ*`` and ``|r - r*| / θ*`` for the reported ``θ = value²`` and absolute residual ``r`` against the
    extended-precision ``θ*`` and ``r*`` of :func:`extended_rayleigh` (cached)."""
    params = {"count": count, "seed": seed}

    def compute() -> dict[str, list]:
        columns: dict[str, list] = {name: [] for name in ("family", "call", "input", "theta_gap", "residual_gap")}
        problems = list(problem_suite(count, seed))
        for p, problem in enumerate(progress(problems, "certificate rounding", len(problems))):
            if problem.X.dtype != torch.float64:
                continue
            J = jacobian_matrix(problem.fn, problem.X)
            for c, call in enumerate(CALLS):
                result = local_lipschitz(problem.fn, problem.X, detailed=True, seed=p, **call)
                for b in range(len(problem.X)):
                    theta, absolute = extended_rayleigh(J[b].reshape(-1, problem.X[b].numel()),
                                                        result.right_vector[b])
                    value = np.longdouble(float(result.value[b]))
                    reported = value * value
                    columns["family"].append(problem.family)
                    columns["call"].append(c)
                    columns["input"].append(p * BATCH + b)
                    columns["theta_gap"].append(float(abs(reported - theta) / theta))
                    columns["residual_gap"].append(float(abs(float(result.residual[b]) * reported - absolute)
                                                         / theta))
        if not columns["family"]:
            raise ValueError(f"certificate_rounding: no float64 problem among the first {count} inputs")
        assert all(math.isfinite(g) for g in columns["theta_gap"] + columns["residual_gap"])
        return columns

    return cached_table("certificate_rounding", params, compute)
