"""The verdicts the book gives a published number, one definition for every page, and how they are decided; the
corrections and sharpenings the book makes, by kind.

Every published number (:data:`lipnb.paper.paper_numbers.PUBLISHED`) gets exactly one of the :data:`VERDICTS`, from
our measurement of what the paper measured (``as published``); a correction of the published code is judged on
its own, one correction at a time, never two merged. Every box a chapter titles "Correction", "Correction of the
published code" or "Sharpening" is one of :data:`BOOK_CORRECTIONS` (:func:`classify_correction`), so that the
three kinds are counted apart everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..arguments import as_paired_points, check_real
from .stats import student_interval

__all__ = ["BOOK_CORRECTIONS", "CORRECTION_KINDS", "VERDICTS", "BookCorrection", "CorrectionKind", "Verdict",
           "bound_verdict", "classify_correction", "correction_subject", "correction_titles", "count_verdicts",
           "drawn_constant", "drawn_verdict", "interval_verdict"]

Verdict = Literal["reproduced", "differs", "holds trivially", "by construction", "a setting",
                  "not comparable offline"]

VERDICTS: dict[str, str] = {
    "reproduced": "our 95% interval, measured on the paper's setting, contains the published value",
    "differs": "our 95% interval excludes the published value (or the points do not follow a drawn curve's shape)",
    "holds trivially": "the published number is a bound, and every value below it meets it: ours does",
    "by construction": "the value follows from how the model or input is built, whatever the data: not a finding",
    "a setting": "a choice of the experiment (seed, layer, radius, grid, stopping rule), used as published",
    "not comparable offline": "needs a model this offline run does not have",
}

# The three kinds of box the book titles "Correction: ...", "Correction of the published code: ..." and
# "Sharpening: ...", counted apart on every page: a correction corrects a statement that is false as printed.
CorrectionKind = Literal["statement", "code", "sharpening"]
CORRECTION_KINDS: dict[str, str] = {
    "statement": "correction of a statement that is false as printed",
    "code": "correction of the published code",
    "sharpening": "sharpening of a true statement, as printed or as the book corrects it",
}
# The title that opens each kind of box, longest first ("Correction of Kim et al.:" is a correction of a statement).
_PREFIXES: tuple[tuple[str, CorrectionKind], ...] = (
    ("Correction of the published code:", "code"),
    ("Correction of Kim et al.:", "statement"),
    ("Correction:", "statement"),
    ("Sharpening:", "sharpening"),
)
_TITLE = re.compile(r"^(?:`{3,}|:{3,})\{admonition\}\s+((?:Correction|Sharpening)\b.*?)\s*$", re.M)


@dataclass(frozen=True)
class BookCorrection:
    """One correction or sharpening the book makes: a ``phrase`` its box's title contains (and no other box's), its
    ``kind``, ``whose`` statement or code it corrects, the results it is ``about`` (as the theorems page names
    them; none for the published code) and, for a correction of a statement, its ``weight``: ``"substantive"`` where the
    printed bound fails, ``"minor"`` where a step or a detail does."""

    phrase: str
    kind: CorrectionKind
    whose: str
    about: tuple[str, ...] = ()
    weight: str = ""


_CASTIN, _KIM, _CODE = "Castin et al.", "Kim et al.", "Castin et al.'s code"
_B = BookCorrection
BOOK_CORRECTIONS: tuple[BookCorrection, ...] = (
    _B("Lemma 3.1 needs a convex set", "statement", _CASTIN, ("Lemma 3.1",), "minor"),
    _B("Lemma C.5 gives the local constant", "statement", _CASTIN, ("Lemma C.5",), "minor"),
    _B("Theorem 4.4 needs Hardy's factor 2", "statement", _CASTIN, ("Theorem 4.4",), "substantive"),
    _B("Lambert-W term", "statement", _KIM, ("Theorem 3.2, ∞-norm", "Theorem 3.2, 2-norm"), "minor"),
    _B("2-norm bound needs", "statement", _KIM, ("Theorem 3.2, 2-norm",), "substantive"),
    _B("published constants are not local Lipschitz constants", "code", _CODE),
    _B("random-GPT-2 real-data points", "code", _CODE),
    _B("random-GPT-2 adversarial inputs are not built on the head", "code", _CODE),
    _B("BERT-decoder adversarial panel", "code", _CODE),
    _B('"masked BERT" panels', "code", _CODE),
    _B("Theorems 3.3 and 4.3 hold with", "sharpening", _CASTIN, ("Theorem 3.3", "Theorem 4.3")),
    _B("Theorem 3.5 holds with the exponent", "sharpening", _CASTIN, ("Theorem 3.5",)),
    _B("two-Dirac constant", "sharpening", _CASTIN, ("Proposition 3.6, Proposition C.8",)),
    _B("2-norm bound holds with", "sharpening", _KIM, ("Theorem 3.2, 2-norm",)),
    _B("Theorem E.3 holds with", "sharpening", _CASTIN, ("Lemma E.2, Theorem E.3",)),
)



def correction_titles(text: str) -> list[str]:
    """The title of every admonition in the MyST ``text`` of a chapter that starts with "Correction" or
    "Sharpening", in order."""
    return _TITLE.findall(text)


def classify_correction(title: str) -> BookCorrection:
    """The correction a box titled ``title`` makes (one of :data:`BOOK_CORRECTIONS`).

    The title's opening words give its kind ("Correction:", "Correction of the published code:", "Sharpening:"),
    the phrase it contains gives the correction, and the two must agree: a ``ValueError`` names a title with
    another opening, a title that contains no registered phrase or several, and a title whose opening says
    another kind than the correction it makes (a sharpening titled "Correction", a defect of the code titled as
    one of a statement).
    """
    if not isinstance(title, str):
        raise TypeError(f"classify_correction: a title is a str, not {type(title).__name__}")
    opening = next(((prefix, kind) for prefix, kind in _PREFIXES if title.startswith(prefix)), None)
    if opening is None:
        raise ValueError(f"cannot classify the box {title!r}: its title opens with none of "
                         f"{[prefix for prefix, _ in _PREFIXES]}")
    subject = title[len(opening[0]):]
    matches = [c for c in BOOK_CORRECTIONS if c.phrase in subject]
    if len(matches) != 1:
        raise ValueError(f"cannot classify the box {title!r}: it contains {len(matches) or 'none'} of the "
                         "registered phrases (lipnb.experiments.verdicts.BOOK_CORRECTIONS): register it there")
    correction = matches[0]
    if correction.kind != opening[1]:
        raise ValueError(f"the box {title!r} is titled as a {CORRECTION_KINDS[opening[1]]}, but it is a "
                         f"{CORRECTION_KINDS[correction.kind]}: retitle it "
                         f"{next(p for p, k in _PREFIXES if k == correction.kind)!r}")
    return correction


def correction_subject(title: str) -> str:
    """``title`` without its opening words ("Sharpening: the two-Dirac ..." -> "the two-Dirac ...")."""
    for prefix, _ in _PREFIXES:
        if title.startswith(prefix):
            return title[len(prefix):].strip()
    return title


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
