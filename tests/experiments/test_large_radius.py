"""The selection limit of Theorem 3.7 (:mod:`lipnb.experiments.large_radius`): the fitted rate is the smallest score
gap, and the distances are those of dense Jacobians against the argmax selection built here by hand."""

from __future__ import annotations

import pytest
import torch

from lipnb import jacobian_matrix, self_attention
from lipnb.experiments.large_radius import selection_convergence

F64 = torch.float64


def _problem(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    A, V = torch.randn(2, 3, 3, dtype=F64, generator=g) / 3**0.5
    X = torch.nn.functional.normalize(torch.randn(1, 4, 3, dtype=F64, generator=g), dim=-1)
    return X, A, V


@pytest.mark.parametrize("masked", [False, True])
def test_the_rate_is_the_smallest_score_gap(masked: bool) -> None:
    X, A, V = _problem(0)
    run = selection_convergence(X, A, V, masked=masked)
    scores = (X[0] @ A.T) @ X[0].T
    if masked:
        scores = scores.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), -torch.inf)
    top2 = scores.topk(2, dim=-1).values
    gap = (top2[:, 0] - top2[:, 1]).min().item()
    assert run.gap == pytest.approx(gap, rel=1e-12)
    assert run.rate == pytest.approx(gap, rel=0.02)
    # the distance at the largest radius, from a selection matrix built by hand
    m = scores.argmax(-1)
    S = torch.zeros(4, 3, 4, 3, dtype=F64)
    for i in range(4):
        S[i, :, m[i], :] = V
    R = run.radii[-1]
    J = jacobian_matrix(lambda Z: self_attention(Z, A, V, masked=masked), R * X)[0]
    assert run.error[-1].item() == pytest.approx(torch.linalg.matrix_norm(J - S.reshape(12, 12), ord=2).item(),
                                                 rel=1e-9, abs=1e-15)
    assert bool((run.gap * run.radii[run.tail] ** 2 >= 8).all())


def test_refusals() -> None:
    X, A, V = _problem(1)
    with pytest.raises(ValueError, match="one sequence"):
        selection_convergence(X.expand(2, -1, -1), A, V)
    with pytest.raises(ValueError, match="tail"):
        selection_convergence(X, A, V, tail=40.0)
    tied = torch.zeros(1, 3, 3, dtype=F64)
    with pytest.raises(ValueError, match="unique argmax"):
        selection_convergence(tied, A, V)
