"""The verdicts the book gives a published number, one definition for every page, and how they are decided.

Every published number (:data:`lipnb.paper.paper_numbers.PUBLISHED`) gets exactly one of the :data:`VERDICTS`, from
our measurement of what the paper measured (``as published``); a correction of the published code is judged on
its own, one correction at a time, never two merged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from ..arguments import as_paired_points, check_real
from .stats import student_interval

__all__ = ["CORRECTION_TARGETS", "VERDICTS", "Verdict", "bound_verdict", "count_verdicts", "drawn_constant",
           "drawn_verdict", "interval_verdict"]

Verdict = Literal["reproduced", "differs", "holds trivially", "by construction", "a setting",
                  "not comparable offline"]

VERDICTS: dict[str, str] = {
    "reproduced": "our 95% interval, measured on the paper's setting, contains the published value",
    "differs": "our 95% interval excludes the published value (or the points do not follow a drawn curve's shape)",
    "holds trivially": "the published number is a bound, and every value below it meets it: ours does",
    "by construction": "the value follows from how the model or input is built, whatever the data: not a finding",
    "a setting": "a choice of the experiment (seed, layer, radius, grid, stopping rule), used as published",
    "not comparable offline": "needs a model this offline build does not have",
}

# Whose statement each correction of the book corrects, by the start of its admonition title (after "Correction").
CORRECTION_TARGETS: dict[str, str] = {
    "Lemma 3.1 needs a convex set": "the paper",
    "Theorem 3.3 holds with": "the paper",
    "Theorems 3.3 and 4.3 hold with": "the paper",
    "Lemma C.5 gives the local constant": "the paper",
    "the two-Dirac constant is": "the paper",
    "Theorem 3.5 holds with the exponent": "the paper",
    "Theorem 4.4 needs Hardy's factor 2": "the paper",
    "the published constants are not": "the published code",
    "the random-GPT-2 real-data points": "the published code",
    "the published random-GPT-2 adversarial inputs": "the published code",
    "the BERT-decoder adversarial panel": "the published code",
    "the \"masked BERT\" panels": "the published code",
    "the factor 2 in App. C.5": "the book's chapter on tightness",
    "the Lambert-W term": "Kim et al.'s paper",
    "the 2-norm bound needs": "Kim et al.'s paper",
}


def interval_verdict(published: float, low: float, high: float) -> Verdict:
    """``reproduced`` when ``low <= published <= high``, else ``differs``; a NaN (an interval that could not be
    computed) has no verdict and is refused."""
    published, low, high = (check_real(v, name) for v, name in ((published, "published"), (low, "low"),
                                                                  (high, "high")))
    if not low <= high:
        raise ValueError(f"interval_verdict: low {low} exceeds high {high}")
    return "reproduced" if low <= published <= high else "differs"


def bound_verdict(bound: float, high: float) -> Verdict:
    """A published upper bound (e.g. an exponent below 1/2): ``holds trivially`` when our interval lies below it;
    a NaN end is refused."""
    bound, high = check_real(bound, "bound"), check_real(high, "high")
    return "holds trivially" if high < bound else "differs"


def drawn_constant(n: Sequence[float], lip: Sequence[float], exponent: float) -> tuple[float, float, float]:
    """The constant ``C`` of a curve ``C n^exponent`` through measured points: the geometric mean of
    ``lip / n^exponent`` and its 95% Student interval ``(C, low, high)``."""
    x, y = as_paired_points(n, lip, ("n", "lip"), positive=True, minimum=2)
    exponent = check_real(exponent, "exponent")
    centre, low, high = student_interval(y.log() - exponent * x.log())
    return math.exp(centre), math.exp(low), math.exp(high)


def drawn_verdict(constant: float, exponent: float, n: Sequence[float], lip: Sequence[float],
                  alpha_interval: tuple[float, float]) -> Verdict:
    """A drawn curve ``constant · n^exponent`` is reproduced when the points follow it: the interval of their
    fitted exponent (``alpha_interval``) contains ``exponent`` and :func:`drawn_constant` contains ``constant``."""
    constant = check_real(constant, "constant")
    _, low, high = drawn_constant(n, lip, exponent)
    shape = interval_verdict(exponent, *alpha_interval)
    return "reproduced" if shape == "reproduced" and low <= constant <= high else "differs"


def count_verdicts(verdicts: Iterable[str]) -> dict[str, int]:
    """How many of ``verdicts`` carry each verdict word, every word listed (0 when absent)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        if v not in counts:
            raise ValueError(f"unknown verdict {v!r}; the verdicts are {list(VERDICTS)}")
        counts[v] += 1
    return counts
