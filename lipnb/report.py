"""The three things every chapter does: state a number in the prose, check a claim, draw a named figure.

* :func:`state` glues a computed number into the prose (``{glue:text}`name``) and returns it formatted;
* :data:`check` checks a claim stated once, as a comparison of numbers (``check.below``, ``check.above``,
  ``check.close``, ``check.between``, ``check.equal``): the verdict and the printed margin come from the
  same comparison, so they cannot disagree. Each check prints one ledger line
  ``holds: <claim> | <value> <op> <threshold> | margin <m>`` and raises ``AssertionError`` when it fails;
  :func:`read_ledger` collects those lines from the stored outputs of every chapter;
* :func:`markdown_table` shows a table as MyST Markdown, so the book renders it as an HTML table whose
  cells may hold links and math, instead of fixed-width text wider than the page;
* :func:`figure` opens a figure whose title is the question it answers; :func:`show` glues it under a name
  that a ``{glue:figure}`` directive captions and labels, so the prose cites it with ``{numref}``.

The margin of a check is its slack relative to the threshold: ``(bound - value) / |bound|`` for an upper
bound, ``1 - |value - reference| / tolerance`` for closeness. It is 0 at the edge of failing and negative
when the check fails. An upper bound or a closeness that holds with a margin of at least 0.5 is reported
as such ("every error ≤ half of rtol 1e-12", margin 0.5): its exact value is often rounding noise, whose
digits would differ from one CPU to another; the tight checks, the ones the ledger is for, print in full.
Outside a notebook build (plain Python) gluing is skipped and values are returned.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["Check", "LedgerEntry", "check", "figure", "markdown_table", "read_ledger", "show", "state"]

Number = float | int | np.ndarray


def _glue(name: str, value: object) -> None:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"glue name {name!r} must be non-empty letters, digits, '_' or '-'")
    try:
        from myst_nb import glue
    except ImportError:
        return
    glue(name, value, display=False)


def state(name: str, value: float | int | str, fmt: str = ".3g") -> str:
    """Glue ``value`` formatted with ``fmt`` under ``name`` for ``{glue:text}`name``` and return the text."""
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()  # a 0-d tensor or numpy scalar
    if isinstance(value, bool) or not isinstance(value, (float, int, str)):
        raise TypeError(f"{name}: state a float, an int or a str, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: refusing to state a non-finite number ({value})")
    text = value if isinstance(value, str) else format(value, fmt)
    _glue(name, text)
    return text


def _array(name: str, value: object) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().double().numpy()
    try:
        out = np.asarray(value, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(f"check: {name} must be a number or an array of numbers, not {type(value).__name__}") from err
    if out.size == 0:
        raise ValueError(f"check: {name} is empty")
    if np.isnan(out).any():
        raise ValueError(f"check: {name} holds NaN")
    return out


# An upper bound or a closeness that holds with at least this slack is reported as "comfortably inside", with
# this margin: its exact value and margin are often rounding or solver noise whose digits differ from one CPU
# to another (an error of 4e-14 or 5e-14 against 1e-12), and tell the reader nothing the verdict does not.
FAR = 0.5


def _fmt(x: float) -> str:
    return f"{x:.4g}"


class Check:
    """Checks of claims stated as one comparison; each prints its ledger line and returns its margin."""

    @staticmethod
    def _report(claim: str, holds: bool, detail: str, margin: float) -> float:
        if not isinstance(claim, str) or not claim.strip():
            raise ValueError("check: the claim must be a non-empty sentence")
        line = f"{'holds' if holds else 'FAILS'}: {claim} | {detail} | margin {margin:.2g}"
        print(line)
        if not holds:
            raise AssertionError(f"check failed: {line}")
        return margin

    def below(self, claim: str, value: Number, bound: Number, *, strict: bool = False) -> float:
        """Every ``value`` is at most (``strict``: below) its ``bound``; margin ``min (bound - value) / |bound|``."""
        v, b = np.broadcast_arrays(_array("value", value), _array("bound", bound))
        slack = (b - v) / np.where(b == 0, 1.0, np.abs(b))
        i = int(np.argmin(slack))
        holds = bool((v < b).all() if strict else (v <= b).all())
        if holds and slack.flat[i] >= FAR:
            # Comfortably inside: print the statement, not digits of noise (see FAR).
            return self._report(claim, True, f"every value ≤ half of {_fmt(b.flat[i])}", FAR)
        return self._report(claim, holds, f"{_fmt(v.flat[i])} {'<' if strict else '≤'} {_fmt(b.flat[i])}",
                            float(slack.flat[i]))

    def above(self, claim: str, value: Number, bound: Number, *, strict: bool = False) -> float:
        """Every ``value`` is at least (``strict``: above) its ``bound``; margin ``min (value - bound) / |bound|``."""
        v, b = np.broadcast_arrays(_array("value", value), _array("bound", bound))
        slack = (v - b) / np.where(b == 0, 1.0, np.abs(b))
        i = int(np.argmin(slack))
        holds = bool((v > b).all() if strict else (v >= b).all())
        return self._report(claim, holds, f"{_fmt(v.flat[i])} {'>' if strict else '≥'} {_fmt(b.flat[i])}",
                            float(slack.flat[i]))

    def between(self, claim: str, value: Number, low: Number, high: Number) -> float:
        """Every ``value`` lies in ``[low, high]``; margin: the smaller relative slack of the two sides."""
        v, lo, hi = np.broadcast_arrays(_array("value", value), _array("low", low), _array("high", high))
        if (lo > hi).any():
            raise ValueError("check.between: low must not exceed high")
        width = np.where(hi > lo, hi - lo, 1.0)
        slack = np.minimum(v - lo, hi - v) / width
        i = int(np.argmin(slack))
        holds = bool(((v >= lo) & (v <= hi)).all())
        return self._report(claim, holds, f"{_fmt(v.flat[i])} in [{_fmt(lo.flat[i])}, {_fmt(hi.flat[i])}]",
                            float(slack.flat[i]))

    def close(self, claim: str, value: Number, reference: Number, *, rtol: float = 0.0,
              atol: float = 0.0) -> float:
        """``|value - reference| <= atol + rtol |reference|`` everywhere; margin ``1 - error / tolerance``."""
        if not (rtol >= 0 and atol >= 0 and rtol + atol > 0):
            raise ValueError("check.close: give rtol and/or atol, non-negative and not both zero")
        v, r = np.broadcast_arrays(_array("value", value), _array("reference", reference))
        err = np.abs(v - r)
        tol = atol + rtol * np.abs(r)
        ratio = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
        i = int(np.argmax(ratio))
        tol_text = f"rtol {rtol:.0e}" if atol == 0 else f"atol {atol:.0e}" if rtol == 0 else \
            f"atol {atol:.0e} + rtol {rtol:.0e}"
        holds = bool((err <= tol).all())
        margin = 1.0 - float(ratio.flat[i])
        if holds and margin >= FAR:
            # Comfortably inside: which element is the worst, and by how much, is decided by noise (see FAR).
            return self._report(claim, True, f"every error ≤ half of {tol_text}", FAR)
        return self._report(claim, holds, f"{_fmt(v.flat[i])} vs {_fmt(r.flat[i])} within {tol_text}", margin)

    def equal(self, claim: str, value: object, expected: object) -> float:
        """``value == expected`` exactly (counts, labels, sets); margin 1 when it holds, -1 when not."""
        holds = bool(np.all(np.asarray(value == expected)))
        return self._report(claim, holds, f"{value!r} == {expected!r}", 1.0 if holds else -1.0)


check = Check()


@dataclass(frozen=True)
class LedgerEntry:
    """One check as a chapter printed it."""

    chapter: str
    claim: str
    detail: str
    margin: float


_LEDGER_LINE = re.compile(r"^(holds|FAILS): (?P<claim>.+) \| (?P<detail>.+) \| margin (?P<margin>\S+)$")


def read_ledger(paths: list[Path]) -> list[LedgerEntry]:
    """Every check line in the stored outputs of the notebooks at ``paths`` (a ledger of the book)."""
    entries = []
    for path in paths:
        cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            for out in cell.get("outputs", []):
                if out.get("output_type") != "stream" or out.get("name") != "stdout":
                    continue
                text = out["text"] if isinstance(out["text"], str) else "".join(out["text"])
                for line in text.splitlines():
                    m = _LEDGER_LINE.match(line)
                    if m:
                        entries.append(LedgerEntry(Path(path).stem, m["claim"], m["detail"], float(m["margin"])))
    return entries


def figure(title: str, *, ncols: int = 1, width: float = 6.0, height: float = 3.6,
           sharey: bool = False) -> tuple[Figure, Axes | list[Axes]]:
    """A figure whose title is the question it answers (one row of ``ncols`` panels)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * (1 if ncols == 1 else ncols * 0.75), height),
                             sharey=sharey, squeeze=False)
    fig.suptitle(title, fontsize=11)
    panels = list(axes[0])
    for ax in panels:
        ax.grid(True, which="both", alpha=0.25)
    return fig, panels[0] if ncols == 1 else panels


def show(name: str, fig: Figure) -> Figure:
    """Glue ``fig`` under ``name`` for a captioned ``{glue:figure}`` and close it (it is drawn once, there)."""
    _glue(name, fig)
    plt.close(fig)
    return fig


def markdown_table(rows: list[dict[str, object]], formats: dict[str, str] | None = None) -> object:
    """``rows`` (one dict per row, same keys) as a MyST Markdown table for ``display``; ``formats`` per column.

    Cells are text as given (so they may hold ``{ref}`` links or ``$math$``); numbers are formatted with
    the column's format (default ``.3g``). A ``|`` inside a cell is escaped, and LaTeX's ``\\|`` written ``\\Vert``.
    """
    from IPython.display import Markdown

    if not rows:
        raise ValueError("markdown_table: no rows")
    columns = list(rows[0])
    if any(list(row) != columns for row in rows):
        raise ValueError("markdown_table: every row must have the same columns, in the same order")
    formats = formats or {}

    def cell(column: str, value: object) -> str:
        if isinstance(value, (float, np.floating)) or (isinstance(value, (int, np.integer))
                                                      and column in formats):
            text = format(value, formats.get(column, ".3g"))
        else:
            text = str(value)
        # A table cell cannot hold a bare "|": LaTeX's norm "\|" becomes "\Vert", any other "|" is escaped.
        return text.replace("\\|", "\\Vert ").replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(cell(c, row[c]) for c in columns) + " |" for row in rows]
    return Markdown("\n".join(lines))
