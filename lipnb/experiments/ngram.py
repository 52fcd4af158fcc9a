"""Count-based character models for Part III's baselines: interpolated Kneser-Ney ``n``-grams.

The standard a language-model baseline is held to (Chen & Goodman, 1999, Sec. 3.5 and 4.1.6): *interpolated*
Kneser-Ney with one absolute discount per order, ``D = n₁ / (n₁ + 2 n₂)`` from that order's counts of counts
(``n_r`` = the number of ``n``-grams counted exactly ``r`` times). The highest order uses the counts ``c(h w)``;
every lower order uses continuation counts ``N₁₊(• h w)``, the number of distinct characters seen before
``h w``, and the lowest is interpolated with the uniform distribution over the alphabet, so that no character
has probability zero. With ``T(h) = Σ_w count(h w)`` and ``N₁₊(h •)`` the number of distinct ``w`` after ``h``,

``P(w | h) = max(count(h w) - D, 0) / T(h) + D N₁₊(h •) / T(h) · P(w | h')``,

``h'`` being ``h`` without its first character; a context never seen (``T(h) = 0``) backs off to
``P(w | h')`` entirely. Given fewer than ``order - 1`` characters of context (``context=``), the same model
answers with the level of its recursion that the history reaches: ``P(w | h)`` for the ``h`` it has.

Two ways to score a text: :func:`kneser_ney_bits_per_char` gives every scored character its full context of
``order - 1`` characters; :func:`kneser_ney_window_bits_per_char` scores it as the book's language models are
scored (:func:`lipnb.experiments.charlm.train_char_lm`): consecutive windows whose context restarts at each
window, so that the first characters of a window see fewer than ``order - 1`` characters.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..arguments import check_ids, check_positive_int

__all__ = ["kneser_ney_bits_per_char", "kneser_ney_probabilities", "kneser_ney_window_bits_per_char"]


def _codes(ids: Tensor, k: int, vocab: int) -> Tensor:
    """Each window of ``k`` consecutive ids as one integer (base ``vocab``, first character most significant)."""
    code = torch.zeros(len(ids) - k + 1, dtype=torch.int64)
    for i in range(k):
        code = code * vocab + ids[i:len(ids) - k + 1 + i]
    return code


def _lookup(keys: Tensor, values: Tensor, query: Tensor) -> Tensor:
    """``values`` at ``query`` in the sorted ``keys`` (0 where absent), as float64."""
    if len(keys) == 0:
        return torch.zeros(len(query), dtype=torch.float64)
    at = torch.searchsorted(keys, query).clamp(max=len(keys) - 1)
    return torch.where(keys[at] == query, values[at], torch.zeros_like(values[at])).double()


def _discount(counts: Tensor) -> float:
    """Chen & Goodman's ``D = n₁ / (n₁ + 2 n₂)`` from the counts of counts (``0.5`` if there are none)."""
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 + n2 > 0 else 0.5


def kneser_ney_probabilities(train: Tensor, query: Tensor, vocab: int, order: int, *,
                             context: Tensor | None = None) -> Tensor:
    """Interpolated Kneser-Ney: ``P(w | h)`` for every row of ``query`` ``(M, order)`` (``order - 1`` context
    characters, then ``w``), fitted on the character ids ``train``; float64 ``(M,)``.

    ``context`` ``(M,)``: how many of a row's context characters the model may read (from ``0`` to
    ``order - 1``, the last ones before ``w``; default all): a row with ``c`` of them gets level ``c + 1`` of the
    recursion, and its first ``order - 1 - c`` columns are ignored."""
    order = check_positive_int(order, "order")
    vocab = check_positive_int(vocab, "vocab")
    train, query = check_ids(train, vocab, "train ids"), check_ids(query, vocab, "query ids")
    if train.ndim != 1 or len(train) < order:
        raise ValueError(f"train must be a 1-D sequence of at least order = {order} ids")
    if query.ndim != 2 or query.shape[1] != order:
        raise ValueError(f"query must be (M, order = {order}); got shape {tuple(query.shape)}")
    if context is None:
        context = torch.full((len(query),), order - 1, dtype=torch.int64)
    context = torch.as_tensor(context, dtype=torch.int64)
    if context.shape != (len(query),) or bool(((context < 0) | (context > order - 1)).any()):
        raise ValueError(f"context must be ({len(query)},) counts of context characters in [0, order - 1 = "
                         f"{order - 1}]")
    if vocab ** order >= 2**62:
        raise ValueError(f"vocab ** order = {vocab}**{order} is too large for integer codes")
    # count(k-gram) for k = order: raw counts; for k < order: distinct characters seen before it.
    grams, counts = torch.unique(_codes(train, order, vocab), return_counts=True)
    tables = {order: (grams, counts)}
    for k in range(order - 1, 0, -1):
        distinct = torch.unique(_codes(train, k + 1, vocab))
        tables[k] = torch.unique(distinct % vocab**k, return_counts=True)
    p = torch.full((len(query),), 1.0 / vocab, dtype=torch.float64)
    for k in range(1, order + 1):
        grams, counts = tables[k]
        D = _discount(counts)
        contexts, gram_context = torch.unique(grams // vocab, return_inverse=True)
        total = torch.zeros(len(contexts), dtype=torch.int64).index_add_(0, gram_context, counts)
        types = torch.bincount(gram_context, minlength=len(contexts))
        window = query[:, order - k:]
        code = (window * vocab ** torch.arange(k - 1, -1, -1)).sum(1)
        c = _lookup(grams, counts, code)
        T, N = _lookup(contexts, total, code // vocab), _lookup(contexts, types, code // vocab)
        seen = (T > 0) & (context >= k - 1)
        p = torch.where(seen, ((c - D).clamp(min=0) + D * N * p) / T.clamp(min=1), p)
    return p


def kneser_ney_bits_per_char(train: Tensor, valid: Tensor, vocab: int, order: int) -> float:
    """The count-based baseline of Part III: validation bits/char of an interpolated Kneser-Ney ``order``-gram fitted
    on ``train``, over the positions of ``valid`` with ``order - 1`` characters before them (as the add-one one)."""
    order, vocab = check_positive_int(order, "order"), check_positive_int(vocab, "vocab")
    valid = check_ids(valid, vocab, "valid ids")
    if valid.ndim != 1 or len(valid) < order:
        raise ValueError(f"valid must be a 1-D sequence of at least order = {order} ids")
    windows = torch.stack([valid[i:len(valid) - order + 1 + i] for i in range(order)], 1)
    return float(-kneser_ney_probabilities(train, windows, vocab, order).log2().mean())


def _window_targets(length: int, window: int) -> tuple[Tensor, Tensor]:
    """The characters a language model scores in a text of ``length`` ids cut into consecutive windows of
    ``window`` (:func:`lipnb.experiments.charlm.train_char_lm`'s validation): positions ``1 … usable`` with
    ``usable = (length - 1) // window * window``, and how many characters of context each has (``1`` to
    ``window``: the context restarts at each window)."""
    length, window = check_positive_int(length, "length"), check_positive_int(window, "window")
    usable = (length - 1) // window * window
    if usable == 0:
        raise ValueError(f"length = {length} holds no window of {window} characters and its next one")
    target = torch.arange(1, usable + 1)
    return target, (target - 1) % window + 1


def kneser_ney_window_bits_per_char(train: Tensor, valid: Tensor, vocab: int, order: int, window: int) -> float:
    """Part III's baseline scored on the language models' protocol: validation bits/char of an interpolated
    Kneser-Ney ``order``-gram fitted on ``train``, over the characters :func:`_window_targets` names, each seeing
    only the context its window gives it (at most ``order - 1`` characters)."""
    order = check_positive_int(order, "order")
    valid = torch.as_tensor(valid, dtype=torch.int64)
    if valid.ndim != 1:
        raise ValueError("valid must be a 1-D sequence of ids")
    target, seen = _window_targets(len(valid), window)
    # each row: the order - 1 characters before the target (padded with the first id before the text), then it
    offsets = torch.arange(-(order - 1), 1)
    rows = valid[(target[:, None] + offsets).clamp(min=0)]
    context = seen.clamp(max=order - 1)
    return float(-kneser_ney_probabilities(train, rows, vocab, order, context=context).log2().mean())
