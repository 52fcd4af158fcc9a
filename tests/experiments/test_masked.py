"""The measurements of :mod:`lipnb.experiments.masked` against independent computations: masked attention written
out and differentiated by autograd, the conditional ``W_2`` by brute force over permutations within positions,
and the closed forms of the bounds and of the Cesàro operator."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lipnb.core.inputs import ball_tokens, lemma_c_7_input
from lipnb.experiments.masked import (
    cesaro_matrix,
    cesaro_norms,
    cesaro_pair_ratios,
    masked_chain_sweep,
    masked_growth_sweep,
    masked_mean_field_sweep,
)

F64 = torch.float64


def block_masked(X: torch.Tensor, positions: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Attention of atoms ``(N, d)`` to every atom at the same or an earlier position, written out."""
    S = X @ A.T @ X.T
    S = S.masked_fill(positions[None, :] > positions[:, None], -math.inf)
    return torch.softmax(S, dim=-1) @ X @ V.T


def dense_masked_constant(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> float:
    """``Lip_X(f^m)`` of one sequence ``(n, d)`` from the autograd Jacobian of :func:`block_masked`."""
    n, d = X.shape
    positions = torch.arange(n)
    J = torch.autograd.functional.jacobian(lambda x: block_masked(x.view(n, d), positions, A, V).flatten(),
                                           X.flatten())
    return torch.linalg.matrix_norm(J, ord=2).item()


def brute_conditional_w2(X: torch.Tensor, Y: torch.Tensor, positions: torch.Tensor) -> float:
    """Definition 4.1 for uniform measures: the cheapest permutation within each position, by brute force."""
    total = 0.0
    for s in positions.unique().tolist():
        a, b = X[positions == s], Y[positions == s]
        total += min(sum((a[i] - b[p[i]]).square().sum().item() for i in range(len(a)))
                     for p in itertools.permutations(range(len(a))))
    return math.sqrt(total / len(X))


def test_cesaro_operators() -> None:
    C3 = cesaro_matrix(3)
    expected = torch.tensor([[1, 0, 0], [1 / 2, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3]], dtype=F64)
    assert torch.equal(C3, expected)
    norms = cesaro_norms([1, 2, 64])
    assert norms[0].item() == 1.0
    assert norms[1].item() == pytest.approx(math.sqrt((3 + math.sqrt(5)) / 4), rel=1e-14)
    assert 1 < norms[1] < norms[2] < 2


def test_cesaro_pairs_at_a_zero_are_the_operator_norm(gen: torch.Generator) -> None:
    V = torch.randn(3, 3, generator=gen, dtype=F64)
    A = torch.zeros(3, 3, dtype=F64)
    ratios = cesaro_pair_ratios(A, V, [2, 5])
    expected = torch.linalg.matrix_norm(V, ord=2) * torch.stack(
        [torch.linalg.matrix_norm(cesaro_matrix(n), ord=2) for n in (2, 5)])
    assert torch.allclose(ratios, expected, rtol=1e-9)


def test_masked_chain_sweep_is_exact(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                     head_3: tuple[torch.Tensor, torch.Tensor]) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A, V = head_3
    table = masked_chain_sweep(A, V, [1.0], [4], per_length=2)
    assert len(table) == 2 * (2 + 2)
    eye = torch.eye(3, dtype=F64)
    a, lam = torch.linalg.matrix_norm(A, ord=2).item(), torch.linalg.eigvalsh(A)
    for row in table.frame.itertuples():
        W = eye if row.values == "I" else V
        v = torch.linalg.matrix_norm(W, ord=2).item()
        assert row.ball_bound == pytest.approx(math.sqrt(3) * v * math.sqrt(a**2 * row.R**4 * (4 * row.n + 1) + row.n),
                                               rel=1e-12)
        assert row.lip <= row.data_bound <= row.ball_bound
    for case, eigenvalue in (("positive", lam[-1].item()), ("negative", lam[0].item())):
        row = table.frame[(table.frame["values"] == "I") & (table.frame.inputs == case)].iloc[0]
        X = lemma_c_7_input(A, 1.0, 4, case=case)[0]
        assert row.lip == pytest.approx(dense_masked_constant(X, A, eye), rel=1e-10)
        rate = eigenvalue / 4 if eigenvalue > 0 else 2 * abs(eigenvalue)
        p = 1 / (1 + 3 * math.exp(-rate))
        assert row.lower == pytest.approx(math.sqrt(3) * p, rel=1e-12)
        assert row.lip >= math.sqrt(1 + 3 * p**2) * (1 - 1e-12)
    assert table.frame[table.frame["values"] == "V"].lower.isna().all()


def test_masked_growth_sweep_matches_dense_constants(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A = torch.diag(torch.tensor([0.9, 0.2, -0.4], dtype=F64))
    eye = torch.eye(3, dtype=F64)
    table = masked_growth_sweep(A, [2.0], [3, 6], per_length=2)
    for n in (3, 6):
        adversarial = table.where(n=n, inputs="adversarial")["lip"].item()
        X = lemma_c_7_input(A, 2.0, n, case="positive")[0]
        assert adversarial == pytest.approx(dense_masked_constant(X, A, eye), rel=1e-5)
        random = table.where(n=n, inputs="random")["lip"].item()
        dense = max(dense_masked_constant(Z, A, eye) for Z in ball_tokens(2, n, 3, 2.0, seed=n))
        assert random == pytest.approx(dense, rel=1e-5)


def test_masked_mean_field_sweep_against_brute_force(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                     gen: torch.Generator) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    A, V = torch.randn(2, 3, 3, generator=gen, dtype=F64) / 2
    table = masked_mean_field_sweep(A, V, [0.5], positions=3, atoms=2, measures=2, distances=[0.5])
    assert len(table) == 2 * 2 and sorted(set(table.frame.kind)) == ["random", "top"]
    positions = torch.arange(3).repeat_interleave(2)
    X = ball_tokens(2, 6, 3, 0.5, seed=50)
    g = torch.Generator().manual_seed(50)
    moved = X + 0.5 * 0.5 * torch.randn(X.shape, generator=g, dtype=F64)
    moved = moved * (0.5 / moved.norm(dim=-1, keepdim=True)).clamp(max=1.0)
    random = table.where(kind="random")["ratio"]
    for b in range(2):
        expected = brute_conditional_w2(block_masked(X[b], positions, A, V), block_masked(moved[b], positions, A, V),
                                        positions) / brute_conditional_w2(X[b], moved[b], positions)
        assert random[b].item() == pytest.approx(expected, rel=1e-10)
    top = table.where(kind="top")
    for b in range(2):
        J = torch.autograd.functional.jacobian(lambda x: block_masked(x.view(6, 3), positions, A, V).flatten(),
                                               X[b].flatten())
        assert top["local"][b].item() == pytest.approx(torch.linalg.matrix_norm(J, ord=2).item(), rel=1e-8)
    assert torch.allclose(top["ratio"], top["local"], rtol=1e-4)
