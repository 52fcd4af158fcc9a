"""The measurements of :mod:`lipnb.experiments.residual_stack` against independent computations: the stack run
layer by layer by hand, autograd Jacobians of the whole stack, matrix exponentials, and distances by hand."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import self_attention
from lipnb.core.flow import attention_flow
from lipnb.experiments.residual_stack import (
    cluster_centres,
    cluster_counts,
    rescaled_tokens,
    separation_pairs,
    stack_convergence,
    stack_log_norms,
)

F64 = torch.float64


def stack(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, L: int) -> torch.Tensor:
    """The residual stack by hand: ``L`` steps ``X + (T/L) f(X)``, its last layer."""
    for _ in range(L):
        X = X + T / L * self_attention(X, A, V)
    return X


@pytest.mark.slow
def test_stack_convergence_against_a_fine_stack(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                gen: torch.Generator) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    X0 = torch.randn(1, 5, 2, generator=gen, dtype=F64)
    A, V = torch.eye(2, dtype=F64), torch.eye(2, dtype=F64)
    table = stack_convergence(X0, A, V, 1.0, [10, 20], reference_steps=200)
    fine = stack(X0, A, V, 1.0, 20000)  # Euler at a tiny step: within 1e-4 of the flow
    for row in table.frame.itertuples():
        error = ((stack(X0, A, V, 1.0, row.depth) - fine).norm() / fine.norm()).item()
        assert row.error == pytest.approx(error, rel=1e-2)
    assert table.frame.rk4_self_error.iloc[0] < 1e-9
    assert table["error"][0] / table["error"][1] == pytest.approx(2.0, rel=0.1)


def test_rescaled_tokens_and_clusters() -> None:
    V = torch.tensor([[1.0, 0.5], [0.5, 2.0]], dtype=F64)
    traj = torch.randn(4, 3, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    y = rescaled_tokens(traj, V, 3.0)
    for k, t in enumerate([0.0, 1.0, 2.0, 3.0]):
        assert torch.allclose(y[k], traj[k] @ torch.linalg.matrix_exp(-t * V).T, rtol=1e-12)
    points = torch.tensor([[0.0, 0.0], [0.05, 0.0], [1.0, 1.0], [1.0, 1.04], [5.0, 0.0]], dtype=F64)
    assert cluster_counts(torch.stack([points, points[[0, 0, 2, 2, 4]]]), 0.1, [0, 1]).tolist() == [3, 3]
    centres, spread = cluster_centres(points, 0.1)
    assert sorted(map(tuple, centres.tolist())) == sorted([(0.025, 0.0), (1.0, 1.02), (5.0, 0.0)])
    assert spread == pytest.approx(0.025, rel=1e-12)


def test_stack_log_norms_is_the_jacobian_of_the_stack(gen: torch.Generator) -> None:
    A, V = torch.randn(2, 2, 2, generator=gen, dtype=F64)
    X0 = torch.randn(1, 4, 2, generator=gen, dtype=F64)
    T, L = 1.0, 6
    traj = attention_flow(X0, A, V, T, L)
    jacobians = torch.stack([torch.autograd.functional.jacobian(
        lambda x: self_attention(x.view(1, 4, 2), A, V).flatten(), X[0].flatten()) for X in traj[:-1]])
    logs, product = stack_log_norms(jacobians, T / L)
    whole = torch.autograd.functional.jacobian(lambda x: stack(x.view(1, 4, 2), A, V, T, L).flatten(),
                                               X0.flatten())
    assert torch.allclose(product, whole, rtol=1e-10, atol=1e-12)
    assert logs[-1].item() == pytest.approx(math.log(torch.linalg.matrix_norm(whole, ord=2).item()), rel=1e-10)
    assert logs[0].item() == 0.0


def test_separation_pairs_are_below_their_gronwall_products(gen: torch.Generator) -> None:
    A, V = torch.eye(2, dtype=F64), torch.eye(2, dtype=F64)
    X0 = torch.randn(1, 6, 2, generator=gen, dtype=F64)
    T, L = 2.0, 20
    direction = torch.nn.functional.normalize(torch.randn(1, 12, generator=gen, dtype=F64), dim=1).view(1, 6, 2)
    traj = attention_flow(X0, A, V, T, L)
    constants = torch.stack([torch.linalg.matrix_norm(torch.autograd.functional.jacobian(
        lambda x: self_attention(x.view(1, 6, 2), A, V).flatten(), X[0].flatten()), ord=2) for X in traj[:-1]])
    pairs = separation_pairs(X0, A, V, T, L, {"near": (1e-4, direction), "far": (0.3, direction)}, constants,
                             fine_from=0.2)
    for name, delta in (("near", 1e-4), ("far", 0.3)):
        p = pairs[name]
        other = stack(X0 + delta * direction, A, V, T, L)
        assert p["log_div"][-1].item() == pytest.approx(
            math.log((other - stack(X0, A, V, T, L)).norm().item() / delta), rel=1e-9)
        assert bool((p["lam"] >= constants).all())
        expected = torch.cat([torch.zeros(1, dtype=F64), torch.log1p(T / L * p["lam"]).cumsum(0)])
        assert torch.allclose(p["log_measured"], expected, rtol=1e-12, atol=1e-12)
        assert bool((p["log_div"][1:] <= p["log_measured"][1:] + 1e-12).all())
    assert pairs["near"]["refinement"] == 0.0 and pairs["far"]["refinement"] >= 0.0
