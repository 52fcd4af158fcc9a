"""The rounding of a float64 certificate (:mod:`lipnb.experiments.certificate_rounding`): its extended-precision
Rayleigh quotient and residual agree with 50-digit arithmetic, the measured rounding stays at float64's level, and a
value off by a planted relative 1e-10 shows as a gap of that size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mpmath
import pytest
import torch

from lipnb.core import lipschitz
from lipnb.experiments import certificate_rounding as rounding

F64 = torch.float64


def test_extended_rayleigh_agrees_with_fifty_digits() -> None:
    """θ and the residual of a non-unit vector, against mpmath at 50 digits on the same float64 entries."""
    g = torch.Generator().manual_seed(0)
    J = torch.randn(7, 5, generator=g, dtype=F64)
    u = torch.randn(5, generator=g, dtype=F64) * 3
    theta, residual = rounding.extended_rayleigh(J, u)
    with mpmath.workdps(50):
        Jm = mpmath.matrix(J.tolist())
        um = mpmath.matrix(u.tolist())
        um = um / mpmath.norm(um)
        Mu = Jm.T * (Jm * um)
        th = (um.T * Mu)[0]
        res = mpmath.norm(Mu - th * um)
        # extended precision: 64 significant bits, about 1e-19 relative, where float64 has 1e-16
        assert abs((mpmath.mpf(str(theta)) - th) / th) < 1e-17
        assert abs(mpmath.mpf(str(residual)) - res) < 1e-17 * th


def test_rounding_is_at_float64_level_and_a_planted_error_shows(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """On the first float64 problems of the audit the reported θ and residual are within 1e-13 of θ* (relative);
    with every value scaled by 1 + 1e-10 the θ gap is about 2e-10."""
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    table = rounding.certificate_rounding_audit(24)
    gaps = torch.cat([table["theta_gap"], table["residual_gap"]])
    assert len(table) > 0 and bool((gaps >= 0).all()) and float(gaps.max()) < 1e-13
    assert set(table.frame["family"]) <= {"linear float64", "prescribed float64"}
    original = lipschitz.local_lipschitz

    def off(*args: object, **kwargs: object) -> lipschitz.LipschitzResult:
        result = original(*args, **kwargs)
        return dataclasses.replace(result, value=result.value * (1 + 1e-10))

    monkeypatch.setattr(rounding, "local_lipschitz", off)
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path / "planted"))
    planted = rounding.certificate_rounding_audit(24)
    assert float(planted["theta_gap"].min()) == pytest.approx(2e-10, rel=1e-3)
