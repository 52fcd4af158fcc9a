"""The growth at Lemma C.7's input (:mod:`lipnb.experiments.adversarial_growth`) against dense float64 Jacobians
computed here with autograd, and the two lower bounds' order."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import self_attention
from lipnb.core import gamma, lemma_c_7_input, random_head
from lipnb.experiments.adversarial_growth import lemma_c_7_table, sqrt_n_growth_table, sqrt_n_window_table

F64 = torch.float64


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def dense(A: torch.Tensor, X: torch.Tensor) -> float:
    """``||D_X f||_2`` for ``V = I`` from autograd's full Jacobian of one input ``(n, d)``."""
    eye = torch.eye(A.shape[0], dtype=F64)
    J = torch.autograd.functional.jacobian(lambda Z: self_attention(Z[None], A, eye)[0], X)
    return torch.linalg.matrix_norm(J.reshape(X.numel(), X.numel()), ord=2).item()


def test_lemma_c_7_table_is_exact_and_above_both_bounds() -> None:
    table = lemma_c_7_table([4], [1.0, 2.0], [2, 5])
    assert set(table.frame.case) <= {"positive", "negative"} and len(table) % 4 == 0
    A = random_head(4, seed=4)
    row = table.frame.iloc[-1]
    X = lemma_c_7_input(A, float(row.R), int(row.n), case=row.case)[0]
    assert row.exact == pytest.approx(dense(A, X), rel=1e-10)
    assert bool((table["exact"] >= table["sharp"] * (1 - 1e-12)).all())
    assert bool((table["sharp"] >= table["lower"]).all())
    torch.testing.assert_close(table["formula"], table["exact"], rtol=1e-9, atol=0)
    assert bool((table.where(chosen=1)["exact"] >= table.where(chosen=1)["prop"] * (1 - 1e-12)).all())


def test_sqrt_n_growth_follows_the_largest_argmax_count() -> None:
    table = sqrt_n_growth_table([0], [8, 16, 64])
    A = random_head(4, seed=10)
    R = math.sqrt(20 / (2 * gamma(A).item()))
    for n, lip in zip([8, 16], table["lip"][:2].tolist(), strict=True):
        assert lip == pytest.approx(dense(A, lemma_c_7_input(A, R, n)[0]), rel=1e-10)
    counts, n = table["count"], table["n"]
    assert bool(((counts == n) | (counts == n - 1)).all())
    assert table["measured"][-1].item() == pytest.approx(table["lip"][-1].item(), rel=1e-5)
    assert bool(table["measured"][:-1].isnan().all())


def test_the_window_table_measures_its_probes() -> None:
    table = sqrt_n_window_table(6, 3, [2.0], [2, 8], points=5, decades=1.0)
    A = random_head(6, seed=3)
    R = math.sqrt(2.0 / (2 * gamma(A).item()))
    probes = table.frame.dropna(subset=["measured"])
    assert sorted(probes.n) == [2, 8]
    torch.testing.assert_close(torch.tensor(probes.measured.to_numpy()), torch.tensor(probes.lip.to_numpy()),
                               rtol=1e-5, atol=0)
    assert table.where(n=8)["lip"].item() == pytest.approx(dense(A, lemma_c_7_input(A, R, 8)[0]), rel=1e-10)
    assert bool((table["lip"] >= table["lower"] * (1 - 1e-12)).all())
