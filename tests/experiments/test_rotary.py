"""Rotary heads against Sec. 5.2's construction (:mod:`lipnb.experiments.rotary`), on the small random Llama-style
decoder, checked against the model without rotation (an independent route to the unrotated head), dense float64
Jacobians and the full ``d x d`` eigenvalues."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lipnb import exact_local_lipschitz, models
from lipnb.core.inputs import head_spectra, lemma_c_7_input
from lipnb.experiments.rotary import ALIGNED_INPUTS, offset_gamma_table, rotary_aligned_sweep, rotary_layer_sweep
from lipnb.models import llama


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def _gamma(A: torch.Tensor) -> float:
    """Prop. 3.4's ``γ = max(γ_1/8, -γ_d)`` from the real eigenvalues of the dense ``A`` (numpy's eig)."""
    values = torch.from_numpy(np.linalg.eigvals(A.double().numpy()))
    real = values.real[values.imag.abs() <= 1e-9 * values.abs().max()]
    return max(float(real.max()) / 8, -float(real.min()))


def test_the_aligned_input_restores_the_unrotated_head() -> None:
    table = rotary_aligned_sweep("llama-random", 1, (2, 4, 8), 20.0, heads=[0, 3]).frame
    assert set(table.input) == set(ALIGNED_INPUTS) and set(table["head"]) == {0, 3}
    assert float(table.output_gap.max()) < 1e-12
    norope = models.load_shared("llama-random-norope")[0]
    rotary = models.load_shared("llama-random")[0]
    for h in (0, 3):
        rows = table[table["head"] == h]
        A = models.head_A(norope, 1, h).double()
        R = float(rows.R.iloc[0])
        assert 2 * _gamma(A) * R**2 == pytest.approx(20.0, rel=1e-6)
        Y = lemma_c_7_input(A, R, 8)
        plain = models.attention_map(norope, 1, "head", head=h)
        lip = rows.set_index(["input", "n"]).lip
        Z = llama.aligned_input(rotary, 1, h, Y)
        rotated = models.attention_map(rotary, 1, "head", head=h)
        torch.testing.assert_close(rotated(Z), plain(Y), rtol=1e-10, atol=1e-10)
        assert float(rows.aligned_ratio.iloc[0]) == pytest.approx(float(Z.norm(dim=-1).max()) / R, rel=1e-6)
        for name, f, X in (("no rotation", plain, Y), ("rotary", rotated, Y), ("rotary, aligned", rotated, Z)):
            assert lip[(name, 4)] == pytest.approx(float(exact_local_lipschitz(f, X[:, :4])[0]), rel=1e-4)


def test_the_rotary_layer_sweep_builds_each_head_at_both_radii() -> None:
    table = rotary_layer_sweep("llama-random", 1, (2, 4), token_radius=16.0, heads=[0, 2, 5])
    assert set(table.rotary) == {"yes", "no"} and set(table.radius) == {"token radius", "2γR² = 20"}
    assert len(table) == 3 * 2 * 2 * 2 and set(table.kind) == {"mha"} and set(table["head"]) == {0, 2, 5}
    norope = models.load_shared("llama-random-norope")[0]
    for h in (0, 5):
        own = table[(table["head"] == h) & (table.radius == "2γR² = 20")].R.iloc[0]
        assert 2 * _gamma(models.head_A(norope, 1, h)) * own**2 == pytest.approx(20.0, rel=1e-5)
    row = table[(table["head"] == 2) & (table.radius == "token radius") & (table.rotary == "no") & (table.n == 4)]
    X = lemma_c_7_input(models.head_A(norope, 1, 2).double(), 16.0, 4)
    dense = exact_local_lipschitz(models.attention_map(norope, 1, "mha"), X)
    assert float(row.lip.iloc[0]) == pytest.approx(float(dense[0]), rel=1e-3)


def test_offset_gammas_equal_those_of_the_full_matrices() -> None:
    offsets = (0, 3, 50)
    table = offset_gamma_table("llama-random", offsets).frame
    model = models.load_shared("llama-random")[0]
    assert len(table) == models.num_layers(model) * len(offsets) * model.config.num_attention_heads
    for layer in (0, 2):
        full = head_spectra(llama.offset_matrices(model, layer, offsets).flatten(0, 1))
        rows = table[table.layer == layer].sort_values(["offset", "head"])
        torch.testing.assert_close(torch.tensor(rows.gamma.to_numpy()), full.gamma, rtol=1e-8, atol=0)
        assert rows.positive.tolist() == full.positive.long().tolist()
