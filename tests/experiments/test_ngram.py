"""Interpolated Kneser-Ney (:mod:`lipnb.experiments.ngram`) against probabilities worked out by hand, and its
invariants."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb.experiments.charlm import ngram_bits_per_char
from lipnb.experiments.ngram import kneser_ney_bits_per_char, kneser_ney_probabilities

A, B, C = 0, 1, 2
TRAIN = torch.tensor([A, B, A, B, B])   # "ababb", alphabet {a, b, c}


def test_bigram_probabilities_worked_out_by_hand() -> None:
    """Train "ababb", bigram model, alphabet of 3.

    Bigram counts: c(ab) = 2, c(ba) = 1, c(bb) = 1; counts of counts n1 = 2, n2 = 1, so D2 = 2 / (2 + 2) = 1/2.
    Continuation counts N1+(. w): a 1 (ba), b 2 (ab, bb), c 0; they total 3 (distinct bigrams), n1 = 1, n2 = 1,
    so D1 = 1 / (1 + 2) = 1/3, and 2 characters have a continuation.
    Unigram: P1(w) = max(N(w) - 1/3, 0) / 3 + (1/3)(2)/3 * (1/3):
        P1(a) = 2/9 + 2/27 = 8/27,  P1(b) = 5/9 + 2/27 = 17/27,  P1(c) = 2/27.
    After a (T = 2, one type): P(b|a) = (2 - 1/2)/2 + (1/2)(1)/2 * 17/27 = 3/4 + 17/108 = 49/54,
        P(a|a) = 1/4 * 8/27 = 2/27, P(c|a) = 1/4 * 2/27 = 1/54.
    After b (T = 2, two types): P(a|b) = 1/4 + (1/2)(2)/2 * 8/27 = 1/4 + 4/27, P(b|b) = 1/4 + 17/54,
        P(c|b) = 1/2 * 2/27 = 1/27.
    After c (never seen): P(w|c) = P1(w).
    """
    query = torch.tensor([[A, B], [A, A], [A, C], [B, A], [B, B], [B, C], [C, A], [C, B], [C, C]])
    expected = torch.tensor([49 / 54, 2 / 27, 1 / 54, 1 / 4 + 4 / 27, 1 / 4 + 17 / 54, 1 / 27, 8 / 27, 17 / 27, 2 / 27],
                            dtype=torch.float64)
    torch.testing.assert_close(kneser_ney_probabilities(TRAIN, query, 3, 2), expected, rtol=1e-12, atol=0)
    unigram = kneser_ney_probabilities(TRAIN, torch.tensor([[A], [B], [C]]), 3, 1)
    # order 1 is the top order: raw counts 2, 3, 0 (n1 = 0, n2 = 1: D = 0), so P = c / 5 exactly
    torch.testing.assert_close(unigram, torch.tensor([2 / 5, 3 / 5, 0.0], dtype=torch.float64))
    valid = torch.tensor([B, C, A, B])
    bits = -(math.log2(1 / 27) + math.log2(8 / 27) + math.log2(49 / 54)) / 3
    assert kneser_ney_bits_per_char(TRAIN, valid, 3, 2) == pytest.approx(bits, rel=1e-12)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_gets_a_distribution(order: int) -> None:
    """Summed over the alphabet, P(. | h) is 1 for every context, seen or not."""
    g = torch.Generator().manual_seed(order)
    train = torch.randint(0, 5, (300,), generator=g)
    contexts = torch.randint(0, 6, (20, order - 1), generator=g) % 6
    contexts[contexts == 5] = 4
    query = torch.cat([contexts.repeat_interleave(6, 0), torch.arange(6).repeat(20)[:, None]], 1)
    p = kneser_ney_probabilities(train, query, 6, order).view(20, 6)
    torch.testing.assert_close(p.sum(1), torch.ones(20, dtype=torch.float64), rtol=1e-12, atol=0)
    assert bool((p > 0).all()) or order == 1


def test_kneser_ney_beats_add_one_on_text() -> None:
    """On a real-looking corpus (a sentence repeated with variations) KN's trigram is below add-one's."""
    text = ("the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat. " * 20).encode()
    ids = torch.tensor(list(text)) - min(text)
    vocab = int(ids.max()) + 1
    train, valid = ids[:1400], ids[1400:]
    assert kneser_ney_bits_per_char(train, valid, vocab, 3) < ngram_bits_per_char(train, valid, vocab, 3)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="query"):
        kneser_ney_probabilities(TRAIN, torch.tensor([[A]]), 3, 2)
    with pytest.raises(ValueError, match="ids must lie"):
        kneser_ney_probabilities(TRAIN, torch.tensor([[A, 5]]), 3, 2)
    with pytest.raises(ValueError, match="valid"):
        kneser_ney_bits_per_char(TRAIN, torch.tensor([A]), 3, 2)
    with pytest.raises(ValueError, match="order"):
        kneser_ney_bits_per_char(TRAIN, TRAIN, 3, 0)
