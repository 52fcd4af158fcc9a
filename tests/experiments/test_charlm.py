"""Character LMs with dot-product, L2 and contractive L2 attention (Kim et al., 2021, Sec. 5)."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb.core.l2_bounds import theorem_3_2_two
from lipnb.core.l2_self_attention import L2AttentionMap, L2Heads
from lipnb.experiments.charlm import (
    CharLM,
    CharLMConfig,
    _Attention,
    char_corpus,
    kind_title,
    ngram_bits_per_char,
    train_char_lm,
)


def test_l2_attention_module_matches_lipnb_on_its_first_row() -> None:
    """Row 0 of the causal map sees only token 0; the last row sees everything, as unmasked L2 attention."""
    torch.manual_seed(0)
    att = _Attention(8, 2, "l2").double()
    X = torch.randn(2, 5, 8, dtype=torch.float64)
    heads = L2Heads(Q=att.Q.detach(), V=att.V.detach(), W=att.O.detach())
    full = L2AttentionMap(heads)(X)
    torch.testing.assert_close(att(X)[:, -1], full[:, -1], rtol=1e-12, atol=1e-12)


def test_contractive_bound_is_theorem_3_2_sharpened() -> None:
    torch.manual_seed(1)
    att = _Attention(8, 2, "l2-contractive").double()
    heads = L2Heads(Q=att.Q.detach(), V=att.V.detach(), W=att.O.detach())
    torch.testing.assert_close(att.bound(7).detach(), theorem_3_2_two(heads, 7, sharpened=True))


def test_training_lowers_the_loss_below_uniform() -> None:
    text = "abcabcabd " * 300
    train, valid, alphabet = char_corpus(text)
    config = CharLMConfig(d=16, heads=2, depth=1, context=8, batch=16, steps=60, lr=1e-2)
    state = torch.random.get_rng_state()
    rows = train_char_lm(train, valid, len(alphabet), config, "l2", log_every=20)
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's random state is left as it was
    assert not rows[-1]["diverged"]
    assert rows[-1]["valid_bpc"] < 0.5 * math.log2(len(alphabet))


def test_divisors_are_each_blocks_bound_at_the_context_length() -> None:
    """Step 0's divisors are the fresh model's Theorem 3.2 bounds (rebuilt from the seed); the curve is unchanged."""
    train, valid, alphabet = char_corpus("abcabcabd " * 100)
    config = CharLMConfig(d=16, heads=2, depth=2, context=8, batch=8, steps=4, lr=1e-2)
    rows = train_char_lm(train, valid, len(alphabet), config, "l2-contractive", log_every=2, divisors=True)
    torch.manual_seed(config.seed)
    fresh = CharLM(len(alphabet), config, "l2-contractive")
    with torch.no_grad():
        expected = [max(1.0, float(b["attn"].bound(config.context))) for b in fresh.blocks]
    assert rows[0]["step"] == 0 and rows[0]["divisor"] == pytest.approx(expected, rel=1e-6)
    assert [r["step"] for r in rows[1:]] == [2, 4] and all(len(r["divisor"]) == 2 for r in rows[1:])
    plain = train_char_lm(train, valid, len(alphabet), config, "l2-contractive", log_every=2)
    assert [r["valid_bpc"] for r in plain] == [r["valid_bpc"] for r in rows[1:]]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="kind"):
        _Attention(8, 2, "cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="valid_fraction"):
        char_corpus("abc", valid_fraction=1.5)


def test_ngram_baselines_match_hand_counts() -> None:
    """Add-one smoothing by hand: a text that repeats "abc" is certain after one character of context."""
    ids = torch.tensor([0, 1, 2] * 50)
    uni = ngram_bits_per_char(ids, ids, 3, 1)
    assert math.isclose(uni, math.log2(3), rel_tol=1e-12)                  # equal counts: uniform
    bi = ngram_bits_per_char(ids, ids, 3, 2)
    # a->b and b->c seen 50 times, c->a 49 times; add-one rows: 51/53, 51/53, 50/52.
    expected = -(100 * math.log2(51 / 53) + 49 * math.log2(50 / 52)) / 149
    assert math.isclose(bi, expected, rel_tol=1e-12)
    with pytest.raises(ValueError, match="order"):
        ngram_bits_per_char(ids[:1], ids, 3, 2)


def test_each_attention_has_one_title_and_a_table_keeps_it_on_one_line() -> None:
    """The prose's names, and the same names with no break point a table could wrap at."""
    assert [kind_title(k) for k in ("dot", "l2", "l2-contractive")] == ["dot-product", "tied L2", "contractive L2"]
    for kind in ("dot", "l2", "l2-contractive"):
        cell = kind_title(kind, in_table=True)
        assert " " not in cell and "-" not in cell
        assert cell.replace("\u2011", "-").replace("\u00a0", " ") == kind_title(kind)


@pytest.mark.parametrize(("kind", "in_table", "error"), [("softmax", False, ValueError), ("l2", 1, TypeError)])
def test_an_unknown_attention_or_a_flag_that_is_not_a_bool_is_refused(kind: str, in_table: object,
                                                                       error: type) -> None:
    with pytest.raises(error):
        kind_title(kind, in_table=in_table)  # type: ignore[arg-type]
