"""The normalization sweeps (:mod:`lipnb.experiments.layernorm_radius`): token norms against the model's own hidden
states, the ellipsoid's identities, the absorbed LayerNorm, and the bounds of a constant gain in closed form."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import models
from lipnb.experiments.layernorm_radius import (
    absorbed_bound_table,
    layernorm_absorption_errors,
    layernorm_token_table,
    normalization_windows,
)

F64 = torch.float64


@pytest.fixture
def cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def test_token_norms_are_the_models_hidden_states(cache: None) -> None:
    table = layernorm_token_table("minilm", n=8, per_length=1)
    model, tokenizer = models.load("minilm", device="cpu")
    model = model.double()
    ids = normalization_windows(tokenizer, 8, 1)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states
    L = models.num_layers(model)
    assert len(table) == L * 2 * 8
    for layer in range(L):
        rows = table.where(layer=layer)
        torch.testing.assert_close(rows["norm"], hidden[layer].norm(dim=-1).flatten(), rtol=1e-12, atol=0)
        assert bool((rows["norm"] <= rows["radius"]).all()) and bool((rows["radius"] <= rows["simple"]).all())
    assert table["z_mean"].abs().max() < 1e-12 and table["norm_gap"].abs().max() < 1e-12
    assert table["input_gap"].max() == 0
    # |z|/√d - 1 = sqrt(σ²/(σ²+ε)) - 1 ≈ -ε/(2σ²)
    torch.testing.assert_close(table["ratio_gap"], -table["eps_gap"], rtol=1e-3, atol=1e-15)


def test_the_absorbed_layernorm_is_the_same_map(cache: None) -> None:
    errors = layernorm_absorption_errors("minilm", n=8, per_length=1)
    assert len(errors) == 6 and errors["error"].max() < 1e-12


def test_a_constant_gain_scales_both_bounds_in_closed_form() -> None:
    g = torch.Generator().manual_seed(0)
    d, n = 4, 5
    A, V = torch.randn(2, d, d, dtype=F64, generator=g)
    Z = d**0.5 * torch.nn.functional.normalize(torch.randn(2, n, d, dtype=F64, generator=g), dim=-1)
    c = 2.0
    table = absorbed_bound_table(A, V, Z, {"two": torch.full((d,), c, dtype=F64)})

    def stated(A: torch.Tensor, V: torch.Tensor, R: float) -> float:
        norm = lambda M: torch.linalg.matrix_norm(M, ord=2).item()  # noqa: E731
        return math.sqrt(3) * norm(V) * math.sqrt(norm(A) ** 2 * R**4 * (4 * n + 1) + n)

    assert table["absorbed"][0].item() == pytest.approx(stated(c * c * A, c * V, d**0.5), rel=1e-12)
    assert table["direct"][0].item() == pytest.approx(stated(A, V, c * d**0.5), rel=1e-12)
    torch.testing.assert_close(table["absorbed"], c * table["direct"], rtol=1e-12, atol=0)
    torch.testing.assert_close(table["lip_z"], table["lip_chain"], rtol=1e-12, atol=0)
    torch.testing.assert_close(table["lip_z"], c * table["lip_y"], rtol=1e-12, atol=0)
    assert table["constant"].min() == 1
    with pytest.raises(ValueError, match="shape"):
        absorbed_bound_table(A, V, Z, {"short": torch.ones(d - 1, dtype=F64)})
