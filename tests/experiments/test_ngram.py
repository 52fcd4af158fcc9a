"""Interpolated Kneser-Ney (:mod:`lipnb.experiments.ngram`) against probabilities worked out by hand, and its
invariants."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from lipnb.experiments.charlm import ngram_bits_per_char
from lipnb.experiments.ngram import (
    _window_targets,
    kneser_ney_bits_per_char,
    kneser_ney_probabilities,
    kneser_ney_window_bits_per_char,
)

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


def _reference_probability(train: list[int], vocab: int, order: int, history: tuple[int, ...], w: int) -> float:
    """Interpolated Kneser-Ney written out from its definition with counters (independent of the tensor code):
    ``P(w | history)`` at the level ``len(history) + 1`` of the ``order``-gram model."""
    top = Counter(tuple(train[i:i + order]) for i in range(len(train) - order + 1))
    tables = {order: top}
    for k in range(order - 1, 0, -1):
        distinct = {tuple(train[i:i + k + 1]) for i in range(len(train) - k)}
        tables[k] = Counter(gram[1:] for gram in distinct)

    def level(h: tuple[int, ...]) -> float:
        lower = 1 / vocab if not h else level(h[1:])
        k = len(h) + 1
        table = tables[k]
        n1, n2 = sum(c == 1 for c in table.values()), sum(c == 2 for c in table.values())
        D = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
        after = {g: c for g, c in table.items() if g[:-1] == h}
        T = sum(after.values())
        if T == 0:
            return lower
        return max(table.get((*h, w), 0) - D, 0) / T + D * len(after) / T * lower

    return level(history)


def test_shortened_contexts_follow_the_definition() -> None:
    """Rows with fewer context characters get the lower levels of the same model (not a model of lower order),
    exactly as the definition written out with counters gives them, and each is a distribution."""
    g = torch.Generator().manual_seed(3)
    train = torch.randint(0, 4, (120,), generator=g)
    query = torch.randint(0, 4, (40, 3), generator=g)
    context = torch.arange(40) % 3
    p = kneser_ney_probabilities(train, query, 4, 3, context=context)
    expected = [_reference_probability(train.tolist(), 4, 3, tuple(row[3 - 1 - c:3 - 1].tolist()), int(row[-1]))
                for row, c in zip(query, context.tolist(), strict=True)]
    torch.testing.assert_close(p, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0)
    torch.testing.assert_close(kneser_ney_probabilities(train, query, 4, 3, context=torch.full((40,), 2)),
                               kneser_ney_probabilities(train, query, 4, 3))
    for c in range(3):  # every history length gives a distribution over the alphabet
        rows = torch.cat([query[:1, :2].repeat(4, 1), torch.arange(4)[:, None]], 1)
        total = kneser_ney_probabilities(train, rows, 4, 3, context=torch.full((4,), c)).sum()
        assert float(total) == pytest.approx(1.0, abs=1e-12)


def test_window_targets_restart_the_context() -> None:
    target, seen = _window_targets(10, 3)
    assert target.tolist() == list(range(1, 10)) and seen.tolist() == [1, 2, 3] * 3
    target, seen = _window_targets(11, 3)  # one character too few for a fourth window
    assert target.tolist() == list(range(1, 10))
    with pytest.raises(ValueError, match="no window"):
        _window_targets(3, 3)


def test_window_scoring_worked_out_by_hand() -> None:
    """Train "ababb" (the bigram probabilities above); valid "bcabab", windows of 2 characters: targets 1-4, each
    with one or two characters before it in its window, so a bigram sees its full context everywhere and equals
    the full-context score of the same targets; a trigram sees one character at each window's first target."""
    valid = torch.tensor([B, C, A, B, A, B])
    # targets c|b, a|c, b|a, a|b (the sixth character starts no window)
    bits = -(math.log2(1 / 27) + math.log2(8 / 27) + math.log2(49 / 54) + math.log2(1 / 4 + 4 / 27)) / 4
    assert kneser_ney_window_bits_per_char(TRAIN, valid, 3, 2, 2) == pytest.approx(bits, rel=1e-12)
    # a trigram: the targets at a window's start (c|b, b|a) see one character, the level-2 probabilities of the
    # trigram model; the others (a|bc, a|ab) see two
    rescored = [_reference_probability(TRAIN.tolist(), 3, 3, h, w) for h, w in
                (((B,), C), ((B, C), A), ((A,), B), ((A, B), A))]
    assert kneser_ney_window_bits_per_char(TRAIN, valid, 3, 3, 2) == pytest.approx(
        -sum(map(math.log2, rescored)) / 4, rel=1e-12)


def test_window_scoring_against_a_direct_rescoring() -> None:
    """Each window rescored on its own (its text alone, so no context can leak in from the previous window) with
    the definition written out: the same bits/char; a window at least as long as the text gives every target
    the context a full-context scorer gives it, except the first ``order - 2`` targets."""
    g = torch.Generator().manual_seed(5)
    train, valid = torch.randint(0, 5, (400,), generator=g), torch.randint(0, 5, (41,), generator=g)
    order, window = 3, 8
    logs = []
    for start in range(0, 40, window):
        text = valid[start:start + window + 1].tolist()
        for j in range(1, window + 1):
            history = tuple(text[max(0, j - (order - 1)):j])
            logs.append(math.log2(_reference_probability(train.tolist(), 5, order, history, text[j])))
    direct = -sum(logs) / len(logs)
    assert kneser_ney_window_bits_per_char(train, valid, 5, order, window) == pytest.approx(direct, rel=1e-12)
    # one window over the whole text: the full-context score of targets 2.. plus target 1 with one character
    full = kneser_ney_bits_per_char(train, valid, 5, order) * (len(valid) - 2)
    first = -math.log2(_reference_probability(train.tolist(), 5, order, (int(valid[0]),), int(valid[1])))
    assert kneser_ney_window_bits_per_char(train, valid, 5, order, 40) == pytest.approx(
        (full + first) / (len(valid) - 1), rel=1e-12)
    with pytest.raises(ValueError, match="context"):
        kneser_ney_probabilities(train, torch.zeros(2, 3, dtype=torch.int64), 5, 3, context=torch.tensor([0, 3]))
