"""Invertible self-attention (Kim et al., 2021, Sec. 4): fixed-point inversion and its geometric rate."""

from __future__ import annotations

import pytest
import torch

from lipnb import exact_local_lipschitz, jacobian_matrix
from lipnb.core.attention import self_attention
from lipnb.core.bounds import theorem_3_3
from lipnb.core.inputs import quadratic_growth_input
from lipnb.core.invertible import contraction_coefficient, fixed_point_inverse, geometric_rate, residual_map
from lipnb.core.l2_bounds import theorem_3_2_two
from lipnb.core.l2_self_attention import L2AttentionMap
from lipnb.experiments.l2_tightness import identity_head, maximize_l2_lipschitz, proof_start


def test_l2_residual_inverts_at_the_spectral_rate() -> None:
    """At inputs of large local constant (so that the rate is slow enough to measure) the error ratio tends
    to the spectral radius of ``c D_X F``, below ``c Lip_X(F)``."""
    heads = identity_head(2)
    F = L2AttentionMap(heads)
    c = contraction_coefficient(theorem_3_2_two(heads, 4, sharpened=True), 0.9)
    X, _ = maximize_l2_lipschitz(heads, proof_start(heads, 3, 4), "2", steps=30)
    result = fixed_point_inverse(F, residual_map(F, c)(X), c, iterations=60, X=X)
    assert bool(result.converged.all())
    torch.testing.assert_close(result.Z, X, rtol=0, atol=1e-12)
    rate = geometric_rate(result.errors)
    spectral = c * torch.linalg.eigvals(jacobian_matrix(F, X)).abs().amax(-1)
    assert bool(((rate / spectral - 1).abs() < 0.05).all()), (rate, spectral)
    assert bool((rate <= c * exact_local_lipschitz(F, X) * 1.01).all())


def test_dot_product_residual_fails_to_invert_at_large_radius() -> None:
    eye = torch.eye(2, dtype=torch.float64) / 2**0.5
    f = lambda Z: self_attention(Z, eye, eye)  # noqa: E731
    c = contraction_coefficient(theorem_3_3(eye, eye, 1.0, 8), 0.5)
    small, large = quadratic_growth_input(torch.tensor([1.0, 16.0], dtype=torch.float64), 8, 2)
    for X, should_converge in ((small[None], True), (large[None], False)):
        result = fixed_point_inverse(f, residual_map(f, c)(X), c, iterations=100, X=X)
        assert bool(result.converged[0]) is should_converge


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="rho"):
        contraction_coefficient(1.0, 1.5)
    with pytest.raises(ValueError, match="lipschitz_bound"):
        contraction_coefficient(0.0)
    with pytest.raises(ValueError, match="iterations"):
        fixed_point_inverse(lambda Z: Z, torch.zeros(1, 2, 2), 0.1, iterations=0)
