"""Prop. 3.4's regime on a real head and the seed sweep (:mod:`lipnb.experiments.radius_regime`), against the closed
form of the bound (numpy's eigenvalues and polyfit) and dense float64 Jacobians."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lipnb import exact_local_lipschitz, models
from lipnb.core.inputs import lemma_c_7_input
from lipnb.experiments.adversarial import adversarial_sweep
from lipnb.experiments.radius_regime import radius_scaling_table, seed_sweep


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def test_radius_scaling_against_the_closed_form_and_dense_jacobians() -> None:
    lengths = (2, 4, 8, 16)
    table = radius_scaling_table("llama-random-norope", 1, lengths, [2.0, 6.0], head=0)
    model = models.load_shared("llama-random-norope")[0]
    A = models.head_A(model, 1, 0).double()
    values = np.linalg.eigvals(A.numpy())
    real = values.real[np.abs(values.imag) <= 1e-9 * np.abs(values).max()]
    gamma = max(real.max() / 8, -real.min())
    n = np.array(lengths, dtype=float)
    f = models.attention_map(model, 1, "head", head=0)
    for row in table.itertuples():
        assert row.two_gamma_r2 == pytest.approx(2 * gamma * row.R**2, rel=1e-6)
        bound = np.sqrt(n - 1) / (1 + (n - 1) * np.exp(-2 * gamma * row.R**2))
        assert row.predicted == pytest.approx(np.polyfit(np.log(n), np.log(bound), 1)[0], rel=1e-6)
        X = lemma_c_7_input(A, row.R, max(lengths))
        exact = [float(exact_local_lipschitz(f, X[:, :k])[0]) for k in lengths]
        assert row.measured == pytest.approx(np.polyfit(np.log(n), np.log(exact), 1)[0], abs=1e-3)


def test_seed_sweep_draws_one_model_per_seed() -> None:
    table = seed_sweep("gpt2-random", 0, (2, 4), [5.0], (0, 1))
    assert sorted(set(table.seed)) == [0, 1] and set(table.kind) == {"head", "mha"} and len(table) == 8
    for seed, name in ((0, "gpt2-random"), (1, "gpt2-random:1")):
        alone = adversarial_sweep(name, 0, (2, 4), 5.0, heads=[0]).frame
        assert table[table.seed == seed].lip.tolist() == alone.lip.tolist()
    assert table[table.seed == 0].lip.tolist() != table[table.seed == 1].lip.tolist()
