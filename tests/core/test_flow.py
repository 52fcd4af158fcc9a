"""The attention flow of :mod:`lipnb.core.flow` (chapter 9's residual stack): Euler and RK4 steps, the per-step
Jacobians, and the cluster labels of the final tokens."""

from __future__ import annotations

import hypothesis.strategies as st
import torch
from conftest import random_attention_params
from hypothesis import given

from lipnb import jacobian_matrix, self_attention
from lipnb.core.flow import attention_flow, attention_flow_rk4, cluster_labels, flow_jacobians

F64 = torch.float64


def test_attention_flow_is_the_residual_stack(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen)
    X0 = torch.randn(2, 5, 3, generator=gen, dtype=F64)
    traj = attention_flow(X0, A, V, 2.0, 8)
    assert traj.shape == (9, 2, 5, 3) and torch.equal(traj[0], X0)
    X = X0
    for k in range(8):
        X = X + 0.25 * self_attention(X, A, V)
        assert torch.allclose(traj[k + 1], X, rtol=1e-14, atol=1e-14)


def test_rk4_is_fourth_order_and_euler_first_order(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen)
    X0 = torch.randn(1, 6, 3, generator=gen, dtype=F64)
    ref = attention_flow_rk4(X0, A, V, 1.0, 800)
    rk = [(attention_flow_rk4(X0, A, V, 1.0, s) - ref).norm().item() for s in (10, 20)]
    eu = [(attention_flow(X0, A, V, 1.0, s)[-1] - ref).norm().item() for s in (100, 200)]
    assert 12 < rk[0] / rk[1] < 20
    assert 1.8 < eu[0] / eu[1] < 2.2


def test_flow_jacobians_match_autodiff(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen, d_v=2)
    X = torch.randn(4, 5, 3, generator=gen, dtype=F64)
    J = flow_jacobians(X, A, V)
    assert torch.allclose(J, jacobian_matrix(lambda Z: self_attention(Z, A, V), X), rtol=1e-10, atol=1e-12)


def test_cluster_labels() -> None:
    Y = torch.tensor([[0.0, 0.0], [0.001, 0.0], [1.0, 1.0], [1.0, 1.002], [5.0, 0.0]], dtype=F64)
    labels = cluster_labels(Y, 0.01)
    assert labels.max().item() + 1 == 3
    assert labels[0] == labels[1] and labels[2] == labels[3] and len({labels[0].item(), labels[2].item(),
                                                                       labels[4].item()}) == 3
    assert cluster_labels(Y[:1], 0.01).tolist() == [0]


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 6), L=st.integers(1, 8))
def test_the_flow_is_the_residual_stack_and_equivariant(seed: int, n: int, L: int) -> None:
    """For any problem: each layer is X + (T/L) f(X), and permuting the tokens permutes every state."""
    g = torch.Generator().manual_seed(seed)
    A, V = torch.randn(2, 3, 3, generator=g, dtype=torch.float64) / 3
    X0 = torch.randn(1, n, 3, generator=g, dtype=torch.float64)
    states = attention_flow(X0, A, V, 1.0, L)
    assert states.shape == (L + 1, 1, n, 3) and torch.equal(states[0], X0)
    for k in range(L):
        torch.testing.assert_close(states[k + 1], states[k] + self_attention(states[k], A, V) / L, rtol=1e-13,
                                   atol=1e-13)
    perm = torch.randperm(n, generator=g)
    torch.testing.assert_close(attention_flow(X0[:, perm], A, V, 1.0, L), states[:, :, perm], rtol=1e-12, atol=1e-12)
