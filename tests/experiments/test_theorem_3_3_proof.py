"""The proof of Theorem 3.3 step by step (:mod:`lipnb.experiments.theorem_3_3_proof`): the terms' norms against the
closed forms of the first two steps, and Theorem C.3 against dense local constants."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import attention_matrix, exact_local_lipschitz, self_attention
from lipnb.experiments.theorem_3_3_proof import data_bound_table, proof_steps

F64 = torch.float64


def _problem() -> tuple[torch.Tensor, torch.Tensor, float]:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(3, 3, dtype=F64, generator=g) / 3**0.5
    R = 1.5
    X = R * torch.nn.functional.normalize(torch.randn(2, 4, 3, dtype=F64, generator=g), dim=-1)
    return X, A, R


def test_the_first_two_steps_are_the_closed_forms() -> None:
    X, A, R = _problem()
    table = proof_steps({"sphere": X}, A, R)
    assert len(table) == 2 * 3 and table["sum_error"].max() < 1e-12
    P = attention_matrix(X, A)
    first = table.where(term=1)
    torch.testing.assert_close(first["exact"], torch.linalg.matrix_norm(P, ord=2), rtol=1e-10, atol=0)
    xbar = P @ X
    cov = torch.einsum("bij,bjk,bjl->bikl", P, X, X) - xbar[..., :, None] * xbar[..., None, :]
    second = torch.linalg.matrix_norm(cov @ A, ord=2).amax(1)
    torch.testing.assert_close(table.where(term=2)["exact"], second, rtol=1e-10, atol=0)
    third = table.where(term=3)
    assert bool((third["exact"] <= third["step"] * (1 + 1e-9)).all())
    norm_A = torch.linalg.matrix_norm(A, ord=2).item()
    torch.testing.assert_close(table.where(input=0)["worst"],
                               torch.tensor([2.0, norm_A * R**2, 2 * norm_A * R**2], dtype=F64))


def test_the_data_bound_holds_and_the_biased_head_is_the_head_with_shifted_queries() -> None:
    X, A, _ = _problem()
    V = torch.randn(2, 3, dtype=F64, generator=torch.Generator().manual_seed(1))
    c = torch.zeros(3, dtype=F64)
    table = data_bound_table({"sphere": X}, A, V, c)
    assert set(table.frame["map"]) == {"unmasked", "masked", "score bias"}
    assert bool((table["lip"] <= table["data_bound"]).all())
    # a zero score bias is the plain head
    torch.testing.assert_close(table.where(map="score bias")["lip"], table.where(map="unmasked")["lip"],
                               rtol=1e-12, atol=0)
    torch.testing.assert_close(table.where(map="unmasked")["lip"],
                               exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X), rtol=1e-12, atol=0)
    assert math.isfinite(table["data_bound"].max().item())
    with pytest.raises(TypeError, match="inputs"):
        data_bound_table({}, A, V, c)
