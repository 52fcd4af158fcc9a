"""Tests of the helpers behind chapters 7 (masked attention) and 9 (attention as a flow)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb import bounds, jacobian_matrix, local_lipschitz, self_attention
from lipnb.bounds import flow_gronwall_log, flow_radius_bound, masked_mean_field_bound
from lipnb.flow import attention_flow, attention_flow_rk4, cluster_labels, flow_jacobians
from lipnb.inputs import ball_tokens
from lipnb.jacobian import jacobian_block_norms
from lipnb.measures import conditional_w2, masked_mean_field, masked_mean_field_ratio

DT = torch.float64


def _params(gen: torch.Generator, d: int = 3, d_v: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    A = torch.randn(d, d, generator=gen, dtype=DT) / d**0.5
    V = torch.randn(d_v, d, generator=gen, dtype=DT) / d**0.5
    return A, V


def _cesaro(n: int) -> torch.Tensor:
    return torch.tril(torch.ones(n, n, dtype=DT)) / torch.arange(1, n + 1, dtype=DT)[:, None]


# ------------------------------------------------------------------ Def 2.6: masked mean-field attention


def test_masked_mean_field_reduces_to_definitions_2_5_and_2_1(gen: torch.Generator) -> None:
    A, V = _params(gen, d_v=2)
    X = torch.randn(3, 6, 3, generator=gen, dtype=DT)
    assert torch.allclose(masked_mean_field(X, torch.arange(6), A, V), self_attention(X, A, V, masked=True),
                          rtol=0, atol=1e-14)
    assert torch.allclose(masked_mean_field(X, torch.zeros(6), A, V), self_attention(X, A, V), rtol=0, atol=1e-14)


def test_masked_mean_field_is_block_causal_and_order_free(gen: torch.Generator) -> None:
    """Atoms see every atom at an earlier or equal position; the order of the atoms is irrelevant."""
    A, V = _params(gen)
    pos = torch.tensor([0, 0, 1, 1, 1, 2])
    X = torch.randn(1, 6, 3, generator=gen, dtype=DT)
    out = masked_mean_field(X, pos, A, V)
    # the two atoms at position 0 form an unmasked pair
    assert torch.allclose(out[:, :2], self_attention(X[:, :2], A, V), atol=1e-14)
    # the atoms at positions 0 and 1 do not depend on the atom at position 2
    Y = X.clone()
    Y[:, 5] += 1.0
    assert torch.equal(masked_mean_field(Y, pos, A, V)[:, :5], out[:, :5])
    perm = torch.tensor([4, 1, 5, 0, 3, 2])
    assert torch.allclose(masked_mean_field(X[:, perm], pos[perm], A, V), out[:, perm], atol=1e-14)


def test_masked_mean_field_weights_equal_repeated_atoms(gen: torch.Generator) -> None:
    """Def C.4 inside Def 2.6: an atom of mass 2/N is two coincident atoms of mass 1/N."""
    A, V = _params(gen)
    X = torch.randn(1, 3, 3, generator=gen, dtype=DT)
    pos = torch.tensor([0, 1, 1])
    weighted = masked_mean_field(X, pos, A, V, weights=torch.tensor([2.0, 1.0, 1.0], dtype=DT))
    repeated = masked_mean_field(X[:, [0, 0, 1, 2]], torch.tensor([0, 0, 1, 1]), A, V)
    assert torch.allclose(weighted, repeated[:, 1:], atol=1e-14)


# ------------------------------------------------------------------ Def 4.1: conditional Wasserstein distance


def _brute_force_w2c(X: torch.Tensor, Y: torch.Tensor, pos: torch.Tensor) -> float:
    total = 0.0
    for s in pos.unique().tolist():
        a, b = X[pos == s], Y[pos == s]
        total += min(sum((a[k] - b[p[k]]).square().sum().item() for k in range(len(a)))
                     for p in itertools.permutations(range(len(a))))
    return math.sqrt(total / len(X))


@given(st.integers(0, 10_000), st.lists(st.integers(1, 3), min_size=1, max_size=3))
def test_conditional_w2_matches_brute_force(seed: int, counts: list[int]) -> None:
    g = torch.Generator().manual_seed(seed)
    pos = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    X = torch.randn(len(pos), 2, generator=g, dtype=DT)
    Y = torch.randn(len(pos), 2, generator=g, dtype=DT)
    assert conditional_w2(X, Y, pos) == pytest.approx(_brute_force_w2c(X, Y, pos), rel=1e-12, abs=1e-14)


def test_conditional_w2_properties(gen: torch.Generator) -> None:
    pos = torch.tensor([0, 0, 0, 1, 1, 2])
    X = torch.randn(6, 3, generator=gen, dtype=DT)
    Y = torch.randn(6, 3, generator=gen, dtype=DT)
    assert conditional_w2(X, X, pos) == 0.0
    assert conditional_w2(X, Y, pos) == pytest.approx(conditional_w2(Y, X, pos), rel=1e-14)
    # permuting atoms inside a position changes nothing; moving one across positions gives +inf
    assert conditional_w2(X[[2, 0, 1, 4, 3, 5]], Y, pos) == pytest.approx(conditional_w2(X, Y, pos), rel=1e-14)
    assert conditional_w2(X, Y, pos, torch.tensor([0, 0, 1, 1, 1, 2])) == math.inf
    assert conditional_w2(X, Y[:5], pos, pos[:5]) == math.inf
    # one atom per position: no transport, the Euclidean distance over sqrt(N) (Lemma 4.2)
    one = torch.arange(6)
    assert conditional_w2(X, Y, one) == pytest.approx((X - Y).norm().item() / math.sqrt(6), rel=1e-14)
    # conditioning can only cost more than the plain W2 of the uniform measures on the same atoms
    assert conditional_w2(X, Y, pos) >= conditional_w2(X, Y, torch.zeros(6)) - 1e-14


def test_lemma_4_2_isometry(gen: torch.Generator) -> None:
    A, V = _params(gen)
    X, Y = torch.randn(2, 1, 7, 3, generator=gen, dtype=DT)
    f = self_attention
    euclid = ((f(X, A, V, masked=True) - f(Y, A, V, masked=True)).norm() / (X - Y).norm()).item()
    assert masked_mean_field_ratio(X, Y, torch.arange(7), A, V).item() == pytest.approx(euclid, rel=1e-12)


# ------------------------------------------------------------------ Theorem 4.4 (corrected) and Hardy's lemma


def test_stated_theorem_4_4_fails_at_a_equals_zero(gen: torch.Generator) -> None:
    """Two atoms, A = 0: the W_c ratio is ||C_2|| ||V|| ≈ 1.144 ||V||, above Theorem 3.5's ||V||."""
    _, V = _params(gen)
    A0 = torch.zeros(3, 3, dtype=DT)
    e = torch.linalg.svd(_cesaro(2)).Vh[0][:, None] * torch.linalg.svd(V).Vh[0]
    X = torch.randn(1, 2, 3, generator=gen, dtype=DT)
    ratio = masked_mean_field_ratio(X, X + 1e-3 * e, torch.arange(2), A0, V).item()
    v = torch.linalg.matrix_norm(V, ord=2).item()
    assert ratio == pytest.approx(math.sqrt((3 + math.sqrt(5)) / 4) * v, rel=1e-10)
    assert ratio > bounds.theorem_3_5(A0, V, 1.0).item()
    assert masked_mean_field_bound(A0, V, 1.0).item() == pytest.approx(2 * v, rel=1e-14)


def test_corrected_bound_is_at_most_twice_theorem_3_5(gen: torch.Generator) -> None:
    A, V = _params(gen)
    R = torch.linspace(0, 3, 31, dtype=DT)
    corrected, stated = masked_mean_field_bound(A, V, R), bounds.theorem_3_5(A, V, R)
    assert bool((corrected >= stated).all() and (corrected <= 2 * stated * (1 + 1e-14)).all())


@given(st.integers(0, 10_000), st.integers(1, 40))
def test_weighted_hardy_inequality(seed: int, K: int) -> None:
    """Our Hardy lemma: the weighted causal-average operator has norm <= 2 on l²(w), for any weights."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(K, generator=g, dtype=DT) + 1e-3
    W = w.cumsum(0)
    T = torch.tril(w.expand(K, K)) / W[:, None]                           # (T D)_k = Σ_{l<=k} w_l D_l / W_k
    root = w.sqrt()
    assert torch.linalg.matrix_norm(root[:, None] * T / root[None, :], ord=2).item() <= 2 + 1e-12


def test_cesaro_norms_increase_towards_two() -> None:
    norms = torch.stack([torch.linalg.matrix_norm(_cesaro(n), ord=2) for n in (1, 2, 8, 64, 512)])
    assert bool((norms.diff() > 0).all() and (norms < 2).all()) and norms[-1].item() > 1.7


@pytest.mark.parametrize("R", [0.1, 0.5, 1.0])
def test_corrected_bound_holds_on_random_pairs_and_worst_directions(gen: torch.Generator, R: float) -> None:
    A, V = _params(gen)
    pos = torch.arange(4).repeat_interleave(3)
    X = ball_tokens(4, 12, 3, R, seed=7)
    Y = X + 0.2 * R * torch.randn(X.shape, generator=gen, dtype=DT)
    Y = Y * (R / Y.norm(dim=-1, keepdim=True)).clamp(max=1.0)
    bound = masked_mean_field_bound(A, V, R).item()
    assert bool((masked_mean_field_ratio(X, Y, pos, A, V) <= bound).all())
    res = local_lipschitz(lambda Z: masked_mean_field(Z, pos, A, V), X, tol=1e-10, detailed=True)
    top = masked_mean_field_ratio(X, X + 1e-6 * R * res.right_vector, pos, A, V)
    assert torch.allclose(top, res.value, rtol=1e-4)
    assert bool((res.value <= bound).all())


# ------------------------------------------------------------------ Jacobian block norms (Lemma D.1)


def test_jacobian_block_norms_exact_and_probed(gen: torch.Generator) -> None:
    A, V = _params(gen, d_v=2)
    X = torch.randn(1, 5, 3, generator=gen, dtype=DT)
    f = lambda Z: self_attention(Z, A, V, masked=True)  # noqa: E731
    J = jacobian_matrix(f, X)[0].view(5, 2, 5, 3)
    exact = J.square().sum((1, 3)).sqrt()
    assert torch.allclose(jacobian_block_norms(f, X, chunk=4), exact, rtol=1e-12, atol=0)
    probed = jacobian_block_norms(f, X, probes=4000)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert bool((probed[future] == 0).all()) and bool((exact[future] == 0).all())
    assert torch.allclose(probed[~future], exact[~future], rtol=0.1)


# ------------------------------------------------------------------ Chapter 9: the attention flow


def test_attention_flow_is_the_residual_stack(gen: torch.Generator) -> None:
    A, V = _params(gen)
    X0 = torch.randn(2, 5, 3, generator=gen, dtype=DT)
    traj = attention_flow(X0, A, V, 2.0, 8)
    assert traj.shape == (9, 2, 5, 3) and torch.equal(traj[0], X0)
    X = X0
    for k in range(8):
        X = X + 0.25 * self_attention(X, A, V)
        assert torch.allclose(traj[k + 1], X, rtol=1e-14, atol=1e-14)


def test_rk4_is_fourth_order_and_euler_first_order(gen: torch.Generator) -> None:
    A, V = _params(gen)
    X0 = torch.randn(1, 6, 3, generator=gen, dtype=DT)
    ref = attention_flow_rk4(X0, A, V, 1.0, 800)
    rk = [(attention_flow_rk4(X0, A, V, 1.0, s) - ref).norm().item() for s in (10, 20)]
    eu = [(attention_flow(X0, A, V, 1.0, s)[-1] - ref).norm().item() for s in (100, 200)]
    assert 12 < rk[0] / rk[1] < 20
    assert 1.8 < eu[0] / eu[1] < 2.2


def test_flow_jacobians_match_autodiff(gen: torch.Generator) -> None:
    A, V = _params(gen, d_v=2)
    X = torch.randn(4, 5, 3, generator=gen, dtype=DT)
    J = flow_jacobians(X, A, V)
    assert torch.allclose(J, jacobian_matrix(lambda Z: self_attention(Z, A, V), X), rtol=1e-10, atol=1e-12)


@given(st.integers(0, 10_000))
def test_flow_stays_in_the_ball(seed: int) -> None:
    """Chapter 9: max_i |x_i^k| <= (1 + h ||V||)^k max_i |x_i^0| along the stack, for any A and V."""
    g = torch.Generator().manual_seed(seed)
    A, V = _params(g)
    A, V = 3 * A, 2 * V
    X0 = torch.randn(1, 7, 3, generator=g, dtype=DT)
    traj = attention_flow(X0, A, V, 2.0, 40)
    R = flow_radius_bound(X0.norm(dim=-1).max(), V, 2.0, 40)
    assert bool((traj.norm(dim=-1).amax((1, 2)) <= R * (1 + 1e-12)).all())
    assert R[-1].item() <= math.exp(2.0 * torch.linalg.matrix_norm(V, ord=2).item()) * R[0].item() * (1 + 1e-12)


def test_gronwall_bounds_hold_on_simulated_pairs(gen: torch.Generator) -> None:
    A, V = _params(gen)
    n, T, L = 6, 2.0, 50
    X0 = ball_tokens(1, n, 3, 1.0, seed=3)
    Y0 = X0 + 1e-3 * torch.randn(X0.shape, generator=gen, dtype=DT)
    r0 = max(X0.norm(dim=-1).max().item(), Y0.norm(dim=-1).max().item())
    tx, ty = attention_flow(X0, A, V, T, L), attention_flow(Y0, A, V, T, L)
    log_div = ((ty - tx).flatten(1).norm(dim=1) / (Y0 - X0).norm()).log()
    log_theorem = flow_gronwall_log(A, V, r0, n, T, L)
    assert log_theorem[0].item() == 0 and bool((log_theorem.diff() > 0).all())
    assert bool((log_div <= log_theorem + 1e-10).all())
    mid = (tx[:-1, 0] + ty[:-1, 0]) / 2
    lam = torch.stack([torch.linalg.matrix_norm(flow_jacobians(Z, A, V), ord=2)
                       for Z in (tx[:-1, 0], ty[:-1, 0], mid)]).amax(0)
    log_measured = flow_gronwall_log(A, V, r0, n, T, L, step_constants=lam)
    assert bool((log_div <= log_measured + 1e-10).all() and (log_measured <= log_theorem + 1e-10).all())


def test_cluster_labels() -> None:
    Y = torch.tensor([[0.0, 0.0], [0.001, 0.0], [1.0, 1.0], [1.0, 1.002], [5.0, 0.0]], dtype=DT)
    labels = cluster_labels(Y, 0.01)
    assert labels.max().item() + 1 == 3
    assert labels[0] == labels[1] and labels[2] == labels[3] and len({labels[0].item(), labels[2].item(),
                                                                       labels[4].item()}) == 3
    assert cluster_labels(Y[:1], 0.01).tolist() == [0]
