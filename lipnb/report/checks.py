"""Checks of the claims a chapter makes, and the ledger that shows them.

:data:`check` checks a claim stated once, as a comparison of numbers (``check.below``, ``check.above``,
``check.close``, ``check.between``, ``check.equal``): the verdict and the margin come from the same comparison,
so they cannot disagree. A check raises ``AssertionError`` when it fails; when it holds it prints nothing and
records a :class:`LedgerEntry` in the chapter's ledger. A check may carry a ``key``, a stable id that names it
whatever its sentence says (the mutation tests name the check they expect to fail by it). :func:`ledger`, the
chapter's last code cell, shows that ledger as one folded block ("What this chapter checked: 23 checks,
tightest margin 0.012") and stores its entries as data, which :func:`read_ledger` reads back from the notebooks.

The margin of a check is its slack relative to the threshold: ``(bound - value) / |bound|`` for an upper
bound, ``1 - |value - reference| / tolerance`` for closeness. It is 0 at the edge of failing and negative
when the check fails. An upper bound or a closeness that holds with a margin of at least 0.5 is reported
as such ("within a relative 1e-12, every error at most half of it", margin 0.5): its exact value is often
rounding noise, whose digits would differ from one CPU to another.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..words import counted
from .numbers import as_written

__all__ = ["EQUALITY_MARGIN", "LEDGER_KEY", "Check", "LedgerEntry", "check", "ledger", "read_ledger"]

Number = float | int | np.ndarray
# The key of the output metadata under which ledger() stores its entries (read by read_ledger): metadata,
# not a mime type of its own, so that no notebook renderer has a type it does not know.
LEDGER_KEY = "lipnb-ledger"


def _array(name: str, value: object, claim: str, key: str = "") -> np.ndarray:
    """``value`` as a float array; NaN fails the claim (it cannot be assessed), an empty or non-numeric value
    is refused, and so is an infinite threshold (every operand but ``"value"``: a bound, an end, a reference), which
    leaves the margin relative to it undefined."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().double().numpy()
    try:
        out = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"check: {name} must be a number or an array of numbers, not {type(value).__name__}") from err
    if out.size == 0:
        raise ValueError(f"check: {name} is empty")
    if np.isnan(out).any():
        named = f" | check {key}" if key else ""
        raise AssertionError(f"check failed: FAILS: {claim} | {name} holds NaN | margin nan{named}")
    if name != "value" and np.isinf(out).any():
        raise ValueError(f"check: {name} is infinite, so the margin relative to it is undefined; state the claim "
                         "with a finite threshold (e.g. in logarithms)")
    return out


# A check whose margin is this small in size is met with equality: an exact tie (two equal counts) or an equality to
# rounding (a bound the value attains by construction, a norm a converged estimate reaches). Its margin says where
# rounding fell, not how near the claim came to failing, so ledgers count such checks apart from the tight ones.
EQUALITY_MARGIN = 1e-9

# An upper bound or a closeness that holds with at least this slack is reported as "comfortably inside", with
# this margin: its exact value and margin are often rounding or solver noise whose digits differ from one CPU
# to another (an error of 4e-14 or 5e-14 against 1e-12), and tell the reader nothing the verdict does not.
FAR = 0.5


def _fmt(x: float, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits, or more while the text ends in a 5 (0.15648 reads "0.15648", not
    "0.1565", which a reader rounding to the prose's three digits would take for 0.157 where the prose says 0.156);
    trailing zeros are dropped only where the value is that short number (0.5 reads "0.5", 1.99998 "2.000")."""
    text = f"{x:.{digits}g}"
    while text.split("e")[0].endswith("5") and digits < 17 and f"{x:.{digits + 1}g}" != text:
        digits += 1
        text = f"{x:.{digits}g}"
    if math.isfinite(x) and abs(float(text) - x) > 1e-9 * abs(x):
        mantissa, _, exponent = f"{x:#.{digits}g}".partition("e")
        text = mantissa.rstrip(".") + (f"e{exponent}" if exponent else "")
    return text


def _tolerance(x: float) -> str:
    """A tolerance as it is written in a claim: 0.05 or 0.001 plainly, 1e-12 as a power of ten (rendered 10⁻¹²)."""
    return f"{x:g}" if 1e-3 <= x < 1e4 else f"{x:.0e}"


def _is_large_whole(x: float) -> bool:
    """Whether ``x`` is a whole number of four or more digits, written in full with thousands separators."""
    return float(x).is_integer() and 1000 <= abs(x) < 1e15


def _said(x: object) -> str:
    """A value of :meth:`Check.equal` as a reader reads it: yes or no, text without quotes, a number (∞ for an
    infinity; a whole number of four or more digits with thousands separators), a list joined by commas without
    brackets, "none" for an empty one."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, float)) and _is_large_whole(x):
        return f"{int(x):,}"  # thousands separators: 1,769,472
    if isinstance(x, float):
        return ("∞" if x > 0 else "−∞") if math.isinf(x) else f"{x:.12g}"
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
        return ", ".join(map(_said, items)) if items else "none"  # no brackets: a reader reads no repr
    return str(x)


def _pair(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` as :func:`_fmt` writes them, with as many more digits as it takes for the texts to read as
    two numbers (1.992 < 1.99998, not 1.992 < 2.000, where 2.000 reads as 2); two whole numbers of four or more
    digits in full, with thousands separators ("1,024 ≥ 1,000")."""
    if _is_large_whole(a) and _is_large_whole(b):
        return f"{int(a):,}", f"{int(b):,}"
    for digits in range(4, 18):
        text_a, text_b = _fmt(a, digits), _fmt(b, digits)
        if float(text_a) != float(text_b):
            break
    return text_a, text_b


def _number(x: object) -> float | str | None:
    """A float for JSON when ``x`` is a finite number, else its text (None stays None)."""
    if x is None or isinstance(x, str):
        return x
    try:
        value = float(x)
    except (TypeError, ValueError):
        return repr(x)
    return value if math.isfinite(value) else repr(value)


@dataclass(frozen=True)
class LedgerEntry:
    """One check: its claim, the comparison as read (``detail``), its margin, and that comparison's parts."""

    chapter: str
    claim: str
    detail: str
    margin: float
    value: float | str | None = None
    op: str = ""
    threshold: float | str | None = None
    key: str = ""

    def line(self) -> str:
        """The entry as one line: ``holds: <claim> | <detail> | margin <m>``."""
        return f"holds: {self.claim} | {self.detail} | margin {self.margin:.2g}"


# The checks that ran since the last ledger(): the chapter's ledger, shown and emptied by ledger().
_LEDGER: list[LedgerEntry] = []
# A check's stable id (``key=``): what the mutation tests name, whatever the claim's sentence says.
_KEY = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class Check:
    """Checks of claims stated as one comparison; each records its ledger entry and returns its margin."""

    @staticmethod
    def _report(claim: str, holds: bool, detail: str, margin: float, value: object = None, op: str = "",
                threshold: object = None, key: str = "") -> float:
        if not isinstance(claim, str) or not claim.strip():
            raise ValueError("check: the claim must be a non-empty sentence")
        if not isinstance(key, str) or (key and not _KEY.fullmatch(key)):
            raise ValueError(f"check: a key is a word of lower-case letters, digits and '-', not {key!r}")
        if not holds:
            named = f" | check {key}" if key else ""
            raise AssertionError(f"check failed: FAILS: {claim} | {detail} | margin {margin:.2g}{named}")
        _LEDGER.append(LedgerEntry("", claim, detail, float(margin), _number(value), op, _number(threshold), key))
        return margin

    def below(self, claim: str, value: Number, bound: Number, *, strict: bool = False, key: str = "") -> float:
        """Every ``value`` is at most (``strict``: below) its ``bound``; margin ``min (bound - value) / |bound|``."""
        v, b = np.broadcast_arrays(_array("value", value, claim, key), _array("bound", bound, claim, key))
        slack = (b - v) / np.where(b == 0, 1.0, np.abs(b))
        i = int(np.argmin(slack))
        holds = bool((v < b).all() if strict else (v <= b).all())
        op = "<" if strict else "≤"
        if holds and slack.flat[i] >= FAR and (b != 0).all():
            # Comfortably inside: print the statement, not digits of noise (see FAR); a bound of 0 has no half,
            # so its comparison is printed, with the slack in absolute terms.
            said = "every value" if v.size > 1 else "the value"
            return self._report(claim, True, f"{said} at most half its bound", FAR, None, op, b.flat[i], key=key)
        text_v, text_b = _pair(v.flat[i], b.flat[i])
        return self._report(claim, holds, f"{text_v} {op} {text_b}", float(slack.flat[i]), v.flat[i], op, b.flat[i],
                            key=key)

    def above(self, claim: str, value: Number, bound: Number, *, strict: bool = False, key: str = "") -> float:
        """Every ``value`` is at least (``strict``: above) its ``bound``; margin ``min (value - bound) / |bound|``."""
        v, b = np.broadcast_arrays(_array("value", value, claim, key), _array("bound", bound, claim, key))
        slack = (v - b) / np.where(b == 0, 1.0, np.abs(b))
        i = int(np.argmin(slack))
        holds = bool((v > b).all() if strict else (v >= b).all())
        op = ">" if strict else "≥"
        text_v, text_b = _pair(v.flat[i], b.flat[i])
        return self._report(claim, holds, f"{text_v} {op} {text_b}", float(slack.flat[i]), v.flat[i], op, b.flat[i],
                            key=key)

    def between(self, claim: str, value: Number, low: Number, high: Number, *, key: str = "") -> float:
        """Every ``value`` lies in ``[low, high]``; margin: the smaller relative slack of the two sides."""
        v, lo, hi = np.broadcast_arrays(_array("value", value, claim, key), _array("low", low, claim, key),
                                        _array("high", high, claim, key))
        if (lo > hi).any():
            raise ValueError("check.between: low must not exceed high")
        width = np.where(hi > lo, hi - lo, 1.0)
        slack = np.minimum(v - lo, hi - v) / width
        i = int(np.argmin(slack))
        holds = bool(((v >= lo) & (v <= hi)).all())
        interval = f"[{_fmt(lo.flat[i])}, {_fmt(hi.flat[i])}]"
        return self._report(claim, holds, f"{_fmt(v.flat[i])} in {interval}", float(slack.flat[i]), v.flat[i],
                            "in", interval, key=key)

    def close(self, claim: str, value: Number, reference: Number, *, rtol: float = 0.0,
              atol: float = 0.0, key: str = "") -> float:
        """``|value - reference| <= atol + rtol |reference|`` everywhere; margin ``1 - error / tolerance``."""
        if not (rtol >= 0 and atol >= 0 and rtol + atol > 0):
            raise ValueError("check.close: give rtol and/or atol, non-negative and not both zero")
        v, r = np.broadcast_arrays(_array("value", value, claim, key), _array("reference", reference, claim, key))
        err = np.abs(v - r)
        tol = atol + rtol * np.abs(r)
        ratio = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
        i = int(np.argmax(ratio))
        tol_text = f"a relative {_tolerance(rtol)}" if atol == 0 else _tolerance(atol) if rtol == 0 else \
            f"{_tolerance(atol)} + a relative {_tolerance(rtol)}"
        holds = bool((err <= tol).all())
        margin = 1.0 - float(ratio.flat[i])
        if holds and margin >= FAR:
            # Comfortably inside: which element is the worst, and by how much, is decided by noise (see FAR).
            said = "every error" if v.size > 1 else "the error"
            return self._report(claim, True, f"within {tol_text}, {said} at most half of it", FAR, None, "=", tol_text,
                                key=key)
        return self._report(claim, holds, f"{_fmt(v.flat[i])} = {_fmt(r.flat[i])} within {tol_text}", margin,
                            v.flat[i], "=", r.flat[i], key=key)

    def equal(self, claim: str, value: object, expected: object, *, key: str = "") -> float:
        """``value == expected`` exactly (counts, labels, sets); margin 1 when it holds, -1 when not."""
        holds = bool(np.all(np.asarray(value == expected)))
        detail = f"{_said(value)}, exactly as expected" if holds else f"{_said(value)}, not {_said(expected)}"
        return self._report(claim, holds, detail, 1.0 if holds else -1.0, value, "==", expected, key=key)


check = Check()


def _html_of(item: object) -> str:
    """An extra of :func:`ledger` as HTML: a table's HTML, a DataFrame's, or text kept as printed."""
    for method in ("to_html", "_repr_html_"):
        if callable(getattr(item, method, None)):
            return getattr(item, method)()
    return f"<pre>{html.escape(str(item))}</pre>"


# A title set in italics in a claim, Markdown's way: "*Alice*" (the book's reading checks use it too).
EMPHASIS = re.compile(r"(?<![\w*])\*([^*\s][^*]*?)\*(?![\w*])")


def _claim_html(claim: str) -> str:
    """A claim as HTML: its numbers as written, escaped, and a ``*title*`` in italics."""
    return EMPHASIS.sub(r"<em>\1</em>", html.escape(as_written(claim)))


def ledger(extra: object | Sequence[object] = (), *, title: str = "What this chapter checked") -> None:
    """Show the checks run since the last call as one folded block, and store them as data; call it last.

    The block's title gives the count and the tightest margin of the checks not met with equality (those, with
    a margin below :data:`EQUALITY_MARGIN` in size, are counted apart); it lists every check, then
    ``extra`` (a provenance dump, a record-versus-rerun table: text, a :func:`markdown_table`, a DataFrame, or a
    list of them). The entries are stored at full precision in the output's metadata (:data:`LEDGER_KEY`) for
    :func:`read_ledger`.
    Raises ``RuntimeError`` when no check ran: a chapter that calls it has claims to show.
    """
    if not _LEDGER:
        raise RuntimeError("ledger: no check ran since the last ledger(); check the chapter's claims first")
    entries = list(_LEDGER)
    others = [e.margin for e in entries if abs(e.margin) >= EQUALITY_MARGIN]
    equal = counted(len(entries) - len(others), "met with equality", "met with equality")
    tightest = f"tightest margin {min(others):.2g}" if others else f"all {equal}"
    apart = f" ({equal}, left out of the tightest margin)" if others and len(others) < len(entries) else ""
    summary = f"{title}: {counted(len(entries), 'check')}{apart}, {tightest}"
    rows = "".join(f"<tr><td>{_claim_html(e.claim)}</td><td>{html.escape(as_written(e.detail))}</td>"
                   f"<td>{as_written(f'{e.margin:.2g}')}</td>"
                   "</tr>" for e in entries)
    extras = [extra] if isinstance(extra, str) or not isinstance(extra, Sequence) else list(extra)
    body = ("<table class=\"lipnb-ledger-table\"><caption>Each claim, the comparison that decided it, and its "
            "margin: the slack relative to the threshold, 0 at the edge of failing.</caption>"
            f"<thead><tr><th>claim</th><th>checked</th><th>margin</th></tr></thead><tbody>{rows}</tbody></table>"
            + "".join(_html_of(item) for item in extras))
    page = f"<details class=\"lipnb-ledger\"><summary>{html.escape(as_written(summary))}</summary>{body}</details>"
    text = "\n".join([summary, *(e.line() for e in entries)])
    _LEDGER.clear()
    try:
        from IPython.display import display
    except ImportError:
        print(text)
        return
    payload = {"checks": [{k: v for k, v in asdict(e).items() if k != "chapter"} for e in entries]}
    display({"text/plain": text, "text/html": page}, metadata={LEDGER_KEY: payload}, raw=True)



def read_ledger(paths: list[Path]) -> list[LedgerEntry]:
    """Every check in the stored outputs of the notebooks at ``paths`` (a ledger of the book), in order.

    Reads what :func:`ledger` stored as data (full precision), never printed text.
    """
    entries = []
    for path in paths:
        chapter = Path(path).stem
        for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                stored = out.get("metadata", {}).get(LEDGER_KEY)
                if stored is not None:
                    entries += [LedgerEntry(chapter, **e) for e in stored["checks"]]
    return entries
