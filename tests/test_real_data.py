"""Part II's sweeps: maps by kind, the power-law fits and the break detector, on closed forms and HF modules."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb import models, real_data
from lipnb.stats import power_law_break


@given(alpha=st.floats(0.1, 1.0), C=st.floats(0.5, 5.0), seed=st.integers(0, 1000))
def test_growth_fits_recover_a_power_law(alpha: float, C: float, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = torch.tensor([4, 8, 16, 32, 64, 128, 256], dtype=torch.float64).repeat_interleave(3)
    lip = C * n**alpha * torch.exp(0.01 * torch.randn(len(n), generator=g, dtype=torch.float64))
    fit = real_data.growth_fits(pd.DataFrame({"g": 0, "n": n.numpy(), "lip": lip.numpy()}), ["g"]).iloc[0]
    assert fit.low <= alpha <= fit.high or abs(fit.alpha - alpha) < 0.01
    assert math.isclose(fit.C, C, rel_tol=0.05)
    assert math.isnan(fit.break_n)


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


@pytest.fixture(scope="module")
def decoder() -> torch.nn.Module:
    return models.load("minilm-decoder")[0]


def test_head_and_mha_maps_match_the_module(decoder: torch.nn.Module) -> None:
    """``"mha"`` (masked) is the HF module's output projection of the heads; ``"head"`` is one of its heads."""
    X = torch.randn(2, 7, 384, generator=torch.Generator().manual_seed(0))
    sa = decoder.encoder.layer[2].attention.self
    mask = torch.full((7, 7), torch.finfo(X.dtype).min).triu(1)[None, None]
    context = sa(X, attention_mask=mask)[0]
    dense = decoder.encoder.layer[2].attention.output.dense
    torch.testing.assert_close(real_data.layer_map(decoder, 2, "mha")(X), dense(context), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(real_data.layer_map(decoder, 2, "head", head=3)(X), context[..., 96:128],
                               rtol=1e-4, atol=1e-4)
    unmasked = sa(X)[0]
    torch.testing.assert_close(real_data.layer_map(decoder, 2, "head", head=3, masked=False)(X),
                               unmasked[..., 96:128], rtol=1e-4, atol=1e-4)


def test_layer_map_rejects_bad_arguments(decoder: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match="kind"):
        real_data.layer_map(decoder, 0, "nope")
    with pytest.raises(ValueError, match="twin"):
        real_data.layer_map(decoder, 0, "self", masked=False)
    with pytest.raises(ValueError, match="head"):
        real_data.layer_map(decoder, 0, "head", head=12)
    with pytest.raises(ValueError, match="dataset"):
        real_data.dataset_text("wiki")


def test_position_aliasing_matches_a_direct_cosine() -> None:
    encoder = models.load("minilm")[0]
    table = real_data.position_aliasing(encoder, 128)
    P = encoder.embeddings.position_embeddings.weight.detach().double()
    row = table.iloc[5]
    direct = torch.nn.functional.cosine_similarity(P[int(row.position)], P[:128], dim=-1)
    assert int(row.alias) == int(direct.argmax())
    assert math.isclose(row.cosine, float(direct.max()), rel_tol=1e-9)
    with pytest.raises(TypeError, match="BERT"):
        real_data.position_aliasing(models.load("gpt2-random")[0], 10)


def test_token_radii_are_the_rms_norms_of_the_attention_inputs() -> None:
    table = real_data.token_radii("minilm", "alice", [6], 2)
    model, tokenizer = models.load("minilm")
    ids = real_data.data.token_sequences(real_data.dataset_text("alice"), tokenizer, [6], 2)[6]
    X = models.attention_inputs(model, 2, ids).double()
    expected = X.norm(dim=-1).square().mean(1).sqrt()
    got = torch.tensor(table[table.layer == 2].radius.to_numpy())
    torch.testing.assert_close(got, expected)
