"""lipnb.core.certify: the certificate of a Krylov result, against the dense float64 Jacobian of a small map."""

from __future__ import annotations

import pytest
import torch

from lipnb import jacobian_matrix, self_attention
from lipnb.core.certify import certify, passes, returned_error, solver_targets
from lipnb.core.krylov import KrylovOutcome, NormalOperator, lanczos, normalize
from lipnb.core.linearization import linearize

F64 = torch.float64


def problem() -> tuple[torch.Tensor, object]:
    g = torch.Generator().manual_seed(0)
    A, V = torch.randn(2, 3, 3, generator=g, dtype=F64)
    X = torch.randn(4, 5, 3, generator=g, dtype=F64)
    return X, lambda Z: self_attention(Z, A.to(Z.dtype), V.to(Z.dtype))


def dense_certificate(fn: object, X: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``θ = uᵀJᵀJu`` and the relative residual ``‖JᵀJu - θu‖ / θ`` at unit ``u``, from the dense Jacobian."""
    J = jacobian_matrix(fn, X)
    M = J.mT @ J
    v = normalize(u.double()).flatten(1)
    Mv = (M @ v.unsqueeze(-1)).squeeze(-1)
    theta = (v * Mv).sum(1)
    return theta, (Mv - theta[:, None] * v).norm(dim=1) / theta


def outcome_at(u: torch.Tensor) -> KrylovOutcome:
    """An outcome whose returned vectors are ``u`` (the solver's own numbers are never read by a float32 run)."""
    outcome = KrylovOutcome.empty(u)
    outcome.vector = u
    return outcome


def test_a_float32_run_is_certified_with_the_dense_float64_numbers() -> None:
    X, fn = problem()
    lin32, lin64 = linearize(fn, X.float()), linearize(fn, X)
    start = torch.randn(X.shape, generator=torch.Generator().manual_seed(1))
    u = lanczos(NormalOperator(lin32, 0.0), start, None, 3, 1e-12).vector  # three products: not converged
    scale = torch.ones(len(X), dtype=F64)
    theta, residual, error = certify(outcome_at(u), NormalOperator(lin32, 0.0, scale), lin64.select, torch.float32,
                                     size=3)  # two groups of inputs
    dense_theta, dense_residual = dense_certificate(fn, X, u)
    torch.testing.assert_close(theta, dense_theta, rtol=1e-12, atol=0)
    torch.testing.assert_close(residual, dense_residual, rtol=1e-10, atol=0)
    # error bounds the distance from √θ to the nearest singular value of J (no premise)
    sigma = torch.linalg.svdvals(jacobian_matrix(fn, X))
    nearest = ((sigma - theta.sqrt()[:, None]).abs() / theta.sqrt()[:, None]).amin(1)
    assert (nearest <= error).all() and (error < 1).all() and (error > 1e-4).all()


def test_a_converged_float32_run_is_certified_within_its_error_of_the_norm() -> None:
    X, fn = problem()
    lin32, lin64 = linearize(fn, X.float()), linearize(fn, X)
    normal = NormalOperator(lin32, 0.0)
    u = torch.randn(X.shape, generator=torch.Generator().manual_seed(2))
    outcome = lanczos(normal, u, None, 60, *solver_targets(None, 1e-4, torch.float32)[1:])
    theta, residual, error = certify(outcome, normal, lin64.select, torch.float32, size=len(X))
    norm = torch.linalg.matrix_norm(jacobian_matrix(fn, X), ord=2)
    value = theta.sqrt() / normal.scale
    assert passes(theta, residual, returned_error(error, torch.float32), None, 1e-4).all()
    assert ((norm / value - 1).abs() <= error).all()  # the top singular value was not missed here


def test_a_float64_run_keeps_the_solvers_numbers_and_adds_their_rounding() -> None:
    X, fn = problem()
    lin = linearize(fn, X)
    normal = NormalOperator(lin, 0.0)
    outcome = lanczos(normal, torch.randn(X.shape, generator=torch.Generator().manual_seed(3), dtype=F64), None,
                      60, 1e-10)
    theta, residual, error = certify(outcome, normal, None, F64, size=len(X))
    assert torch.equal(theta, outcome.theta) and torch.equal(residual, outcome.residual)
    assert ((error - outcome.error) > 0).all() and ((error - outcome.error) < 1e-12).all()


def test_passes_applies_the_test_asked_for() -> None:
    theta = torch.tensor([1.0, 1.0, 0.0, 2.0], dtype=F64)
    residual = torch.tensor([1e-3, 1e-6, 1.0, 1e-6], dtype=F64)
    error = torch.tensor([1e-6, 1e-3, 1.0, 1e-6], dtype=F64)
    assert passes(theta, residual, error, None, 1e-4).tolist() == [True, False, True, True]  # error ≤ rtol
    assert passes(theta, residual, error, 1e-4, None).tolist() == [False, True, True, True]  # residual ≤ tol
    # a zero Jacobian (θ = 0) passes either test


def test_returned_error_counts_the_cast_to_float32() -> None:
    error = torch.tensor([0.0, 1e-5], dtype=F64)
    assert torch.equal(returned_error(error, F64), error)
    assert torch.equal(returned_error(error, torch.float32), error + torch.finfo(torch.float32).eps)


@pytest.mark.parametrize(("tol", "rtol"), [(None, 1e-4), (1e-3, None), (None, 1e-6)])
def test_solver_targets_leave_room_for_the_recomputed_certificate(tol: float | None, rtol: float | None) -> None:
    assert solver_targets(tol, rtol, F64) == (tol, rtol)
    low_tol, low_rtol = solver_targets(tol, rtol, torch.float32)
    for asked, lowered in ((tol, low_tol), (rtol, low_rtol)):
        if asked is None:
            assert lowered is None
        else:  # lowered, by at most half
            assert asked / 2 <= lowered < asked
