"""Part II's sweeps (:mod:`lipnb.experiments.real_text`, :mod:`lipnb.experiments.adversarial`) and the growth fits, on a
tiny grid."""

from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb import data, local_lipschitz, models
from lipnb.experiments.adversarial import adversarial_sweep, head_gamma_table
from lipnb.experiments.real_text import (
    _token_radii,
    layer_radii,
    measure,
    position_aliasing,
    real_text_sweep,
    token_radius,
)
from lipnb.experiments.stats import growth_fits, power_law_break
from lipnb.paper.published import published_estimator


@given(alpha=st.floats(0.1, 1.0), C=st.floats(0.5, 5.0), seed=st.integers(0, 1000))
def test_growth_fits_recover_a_power_law(alpha: float, C: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = torch.tensor([4, 8, 16, 32, 64, 128, 256], dtype=torch.float64).repeat_interleave(3)
    lip = C * n**alpha * torch.exp(0.01 * torch.randn(len(n), generator=g, dtype=torch.float64))
    fit = growth_fits(pd.DataFrame({"g": 0, "n": n.numpy(), "lip": lip.numpy()}), ["g"]).iloc[0]
    assert fit.low <= alpha <= fit.high or abs(fit.alpha - alpha) < 0.01
    assert math.isclose(fit.C, C, rel_tol=0.05)
    assert math.isnan(fit.break_n)


def test_growth_fits_report_the_lack_of_fit_of_a_saturating_curve() -> None:
    n = torch.tensor([2, 26, 50, 74, 98], dtype=torch.float64).repeat_interleave(4)
    wobble = 1 + 0.01 * torch.cos(torch.arange(len(n), dtype=torch.float64))
    fits = growth_fits(pd.DataFrame({"g": [0] * len(n) + [1] * len(n), "n": n.repeat(2).numpy(),
                                     "lip": torch.cat([n**0.25, n / (n + 20)]).mul(wobble.repeat(2)).numpy()}), ["g"])
    assert fits.lof_p[0] > 0.01 and fits.lof_p[1] < 1e-6


def test_published_measure_uses_the_stopping_rule_of_the_models_script() -> None:
    """Random GPT-2's script stops at 1e-3 (1000 steps); another model's at 1e-4: a threshold that matters here."""
    W = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def fn(X: torch.Tensor) -> torch.Tensor:
        return 0.02 * torch.tanh(X @ W)

    X = torch.randn(8, 3, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    at_1e3 = published_estimator(fn, X, threshold=1e-3, max_iter=1000)
    at_1e4 = published_estimator(fn, X, threshold=1e-4, max_iter=100)
    assert not torch.allclose(at_1e3, at_1e4, equal_nan=True)
    torch.testing.assert_close(measure(fn, X, "published", "gpt2-random"), at_1e3, equal_nan=True)
    torch.testing.assert_close(measure(fn, X, "published", "minilm"), at_1e4, equal_nan=True)


def test_power_law_break_finds_a_jump() -> None:
    n = torch.tensor([8, 16, 32, 64, 128, 192, 256, 384, 512], dtype=torch.float64).repeat_interleave(2)
    lip = 3 * n**0.25 * torch.where(n > 128, 2.0, 1.0)
    lip = lip * (1 + 0.01 * torch.cos(torch.arange(len(n), dtype=torch.float64)))
    verdict = power_law_break(n.numpy(), lip.numpy())
    assert verdict["break_n"] == 192
    assert math.isclose(verdict["jump"], 2.0, rel_tol=0.05)
    assert abs(verdict["slope_before"] - 0.25) < 0.02


def test_power_law_break_needs_lengths() -> None:
    with pytest.raises(ValueError, match="distinct lengths"):
        power_law_break([1, 2, 3], [1, 2, 3])


def test_token_radius_is_the_root_mean_square_norm() -> None:
    X = torch.tensor([[[3.0, 4.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]]])
    torch.testing.assert_close(token_radius(X), torch.tensor([5 / math.sqrt(2), 1.0], dtype=torch.float64))


@pytest.mark.slow
def test_real_text_sweep_on_a_tiny_grid(alice: None) -> None:
    """The bounds hold at every input, the radii are :func:`token_radius` of the captured inputs, and the
    adversarial sweep measures the layer at Lemma C.7's input of each head."""
    real = real_text_sweep("minilm", "alice", [4, 8], 1, layers=[1], bounds=True)
    assert real["n"].tolist() == [4.0, 8.0] and real.provenance["sweep"] == "real_text_sweep"
    assert bool((real["lip"] <= real["data_bound"]).all() and (real["data_bound"] <= real["bound"]).all())
    assert bool((real["radius"] <= real["max_norm"]).all())
    model, tokenizer = models.load("minilm")
    ids = data.token_sequences(data.alice_text(), tokenizer, [4, 8], 1)[8]
    X = models.attention_inputs(model, 1, ids)
    torch.testing.assert_close(real.where(n=8)["radius"], token_radius(X))
    tight = local_lipschitz(models.attention_map(copy.deepcopy(model).double(), 1), X.double(), tol=1e-10)
    torch.testing.assert_close(real.where(n=8)["lip"], tight, rtol=1e-3, atol=0)
    with pytest.raises(ValueError, match="bounds=True needs kind='mha'"):
        real_text_sweep("minilm", "alice", [4], 1, kind="self", bounds=True)
    table = head_gamma_table("minilm", [8], 1)
    gammas = table.pivot("gamma", "layer", "head")
    assert gammas.shape == (6, 12) and bool((gammas > 0).all())
    radius = table.pivot("radius", "layer", "head")[:, 0]
    torch.testing.assert_close(radius, torch.tensor(layer_radii("minilm", [8], 1).to_numpy()))
    adv = adversarial_sweep("minilm", 1, [4, 8], radius[1].item(), heads=[0], kinds=("mha",))
    assert adv["lip"].shape == (2,) and bool((adv["lip"] > 0).all())


@pytest.mark.slow
def test_real_text_sweep_reaches_a_llama_decoder(alice: None) -> None:
    """A Llama model goes through the same sweep: causal, rotary, inputs after ``input_layernorm``."""
    from lipnb.models import llama

    real = real_text_sweep("llama-random", "alice", [4, 8], 2, layers=[1, 3])
    assert real.frame.masked.all() and sorted(set(real["layer"].tolist())) == [1.0, 3.0]
    model, tokenizer = models.load("llama-random")
    ids = data.token_sequences(data.alice_text(), tokenizer, [4, 8], 2)[8]
    X = model.layers[3].input_layernorm(models.attention_inputs(model, 3, ids, "block"))
    torch.testing.assert_close(real.where(n=8, layer=3)["radius"], token_radius(X))
    torch.testing.assert_close(real.where(n=8, layer=3)["max_norm"], X.double().norm(dim=-1).amax(1))
    tight = local_lipschitz(llama.attention_map(model, 3), X.double(), tol=1e-10)
    torch.testing.assert_close(real.where(n=8, layer=3)["lip"], tight, rtol=1e-3, atol=0)


def test_token_radii_are_the_rms_norms_of_the_attention_inputs(alice: None) -> None:
    table = _token_radii("minilm", "alice", [6], 2)
    model, tokenizer = models.load("minilm")
    ids = data.token_sequences(data.dataset_text("alice"), tokenizer, [6], 2)[6]
    X = models.attention_inputs(model, 2, ids).double()
    expected = X.norm(dim=-1).square().mean(1).sqrt()
    torch.testing.assert_close(table.where(layer=2)["radius"], expected)
    with pytest.raises(ValueError, match="dataset"):
        data.dataset_text("wiki")


@pytest.mark.slow
def test_position_aliasing_matches_a_direct_cosine() -> None:
    encoder = models.load("minilm")[0]
    table = position_aliasing(encoder, 128)
    P = encoder.embeddings.position_embeddings.weight.detach().double()
    row = table.iloc[5]
    direct = torch.nn.functional.cosine_similarity(P[int(row.position)], P[:128], dim=-1)
    assert int(row.alias) == int(direct.argmax())
    assert math.isclose(row.cosine, float(direct.max()), rel_tol=1e-9)
    far = position_aliasing(encoder, 128, start=64, gap=8)
    assert far.tuned.sum() == 64 and ((far.position - far.alias).abs() > 8).all()
    row = far.iloc[70]
    direct = torch.nn.functional.cosine_similarity(P[int(row.position)], P[:128], dim=-1)
    direct[max(int(row.position) - 8, 0):int(row.position) + 9] = -2
    assert int(row.alias) == int(direct.argmax())
    with pytest.raises(TypeError, match="BERT"):
        position_aliasing(models.load("gpt2-random")[0], 10)
    with pytest.raises(ValueError, match="gap"):
        position_aliasing(encoder, 128, gap=-1)
