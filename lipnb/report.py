"""The three things every chapter does: state a number in the prose, check a claim, draw a named figure.

* :func:`state` glues a computed number into the prose (``{glue:text}`name``) and returns it formatted;
* :data:`check` checks a claim stated once, as a comparison of numbers (``check.below``, ``check.above``,
  ``check.close``, ``check.between``, ``check.equal``): the verdict and the printed margin come from the
  same comparison, so they cannot disagree. Each check prints one ledger line
  ``holds: <claim> | <value> <op> <threshold> | margin <m>`` and raises ``AssertionError`` when it fails;
  :func:`read_ledger` collects those lines from the stored outputs of every chapter, and :func:`read_states`
  the values :func:`state` glued;
* :func:`markdown_table` shows a table as MyST Markdown, so the book renders it as an HTML table whose
  cells may hold links and math, instead of fixed-width text wider than the page;
* :func:`figure` opens a figure whose title is the question it answers; :func:`show` glues it under a name
  that a ``{glue:figure}`` directive captions and labels, so the prose cites it with ``{numref}``. Before
  gluing, :func:`show` draws the figure and refuses one with a defect a reader would see
  (:func:`figure_defects`): tick labels that overprint each other, an axis offset text ("+2.771e1") on a
  title, or a legend entry whose artist draws nothing inside its axes (bars a fraction of a pixel wide).

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
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import Collection
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["Check", "LedgerEntry", "check", "figure", "figure_defects", "markdown_table", "read_ledger",
           "read_states", "show", "state"]

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


def read_states(path: Path) -> dict[str, str]:
    """The values a stored notebook stated with :func:`state`: ``{name: text}``."""
    states = {}
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                states[name] = text.strip("'\"")
    return states


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


# Two boxes that share less than this many pixels (at the figure's dpi) in either direction do not overlap.
_OVERLAP_PX = 0.5


def _text_box(text: Text, renderer) -> Bbox | None:
    """The drawn extent of ``text``, or None when it draws nothing."""
    if not (text.get_visible() and text.get_text().strip()):
        return None
    return text.get_window_extent(renderer)


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > _OVERLAP_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > _OVERLAP_PX)


def _tick_label_boxes(axis: Axis, renderer) -> list[tuple[str, Bbox]]:
    """Every drawn tick label of ``axis`` (major and minor, both sides) inside its axes' span, with its box."""
    span = axis.axes.get_window_extent(renderer)
    lo, hi = (span.x0, span.x1) if axis.axis_name == "x" else (span.y0, span.y1)
    boxes = []
    for label in axis.get_ticklabels(which="both"):
        box = _text_box(label, renderer)
        if box is None:
            continue
        centre = (box.x0 + box.x1) / 2 if axis.axis_name == "x" else (box.y0 + box.y1) / 2
        if lo - 1 <= centre <= hi + 1:  # a tick outside the view limits is not drawn
            # the text as read: "$\mathdefault{3\times10^{0}}$" -> "3\times10^{0}"
            boxes.append((re.sub(r"^\$\\mathdefault\{(.*)\}\$$", r"\1", label.get_text()), box))
    return boxes


def _drawn(artist: Artist | Container, renderer) -> bool:
    """Whether ``artist`` puts at least a pixel of ink inside its axes (a legend handle that shows something)."""
    if isinstance(artist, Container):  # bars of a histogram, an errorbar: drawn if any part is
        return any(_drawn(part, renderer) for part in artist.get_children())
    if not artist.get_visible() or artist.get_alpha() == 0:
        return False
    frame = artist.axes.get_window_extent(renderer) if artist.axes else artist.figure.bbox
    if isinstance(artist, Line2D):
        xy = artist.get_transform().transform(np.asarray(artist.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        inside = xy[(xy[:, 0] >= frame.x0 - 1) & (xy[:, 0] <= frame.x1 + 1)
                    & (xy[:, 1] >= frame.y0 - 1) & (xy[:, 1] <= frame.y1 + 1)]
        if artist.get_marker() not in (None, "None", "", " ") and artist.get_markersize() > 0 and len(inside):
            return True
        if artist.get_linestyle() in ("None", "", " ") or artist.get_linewidth() <= 0 or not len(xy):
            return False
        seen = Bbox.intersection(Bbox([xy.min(axis=0), xy.max(axis=0)]), frame)
        return seen is not None and max(seen.width, seen.height) >= 1
    if isinstance(artist, Collection) and len(artist.get_offsets()) and len(getattr(artist, "get_sizes", list)()):
        xy = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), dtype=float))
        return bool(np.any((xy[:, 0] >= frame.x0) & (xy[:, 0] <= frame.x1)
                           & (xy[:, 1] >= frame.y0) & (xy[:, 1] <= frame.y1)) and np.max(artist.get_sizes()) > 0)
    seen = Bbox.intersection(artist.get_window_extent(renderer), frame)
    return seen is not None and seen.width >= 1 and seen.height >= 1


def figure_defects(fig: Figure) -> list[str]:
    """What a reader would see wrong in ``fig`` once drawn: overprinted tick labels, an axis offset text on
    a title, a legend entry whose artist draws nothing inside its axes. Empty when the figure is clean."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    defects = []
    titles = [t for parent in (fig, *fig.axes) for t in parent.get_children() if isinstance(t, Text)]
    title_boxes = [(t.get_text(), box) for t in titles if (box := _text_box(t, renderer)) is not None]
    for k, ax in enumerate(fig.axes):
        where = f"axes {k}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        for axis in (ax.xaxis, ax.yaxis):
            boxes = _tick_label_boxes(axis, renderer)
            for i, (text_a, box_a) in enumerate(boxes):
                for text_b, box_b in boxes[i + 1:]:
                    if _overlap(box_a, box_b):
                        defects.append(f"{where}: {axis.axis_name} tick labels '{text_a}' and '{text_b}' overlap")
            offset = _text_box(axis.get_offset_text(), renderer)
            for text, box in title_boxes if offset is not None else []:
                if _overlap(offset, box):
                    defects.append(f"{where}: the {axis.axis_name} axis offset "
                                   f"{axis.get_offset_text().get_text()!r} sits on the text {text!r}")
    legends = [(ax.get_legend(), [ax]) for ax in fig.axes if ax.get_legend()] + [(leg, fig.axes) for leg in fig.legends]
    for legend, owners in legends:
        handles: dict[str, list] = {}
        for ax in owners:
            # hist() of several data sets labels the first bar of each; the entry stands for all its bars
            whole = {id(part): container for container in ax.containers for part in container.get_children()}
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, []).append(whole.get(id(handle), handle))
        for label in (t.get_text() for t in legend.get_texts()):
            if label in handles and not any(_drawn(h, renderer) for h in handles[label]):
                defects.append(f"legend entry {label!r} has nothing drawn inside its axes")
    return defects


def show(name: str, fig: Figure) -> Figure:
    """Glue ``fig`` under ``name`` for a captioned ``{glue:figure}`` and close it (it is drawn once, there).

    Raises ``ValueError`` listing :func:`figure_defects` when the drawn figure has any.
    """
    defects = figure_defects(fig)
    if defects:
        plt.close(fig)
        raise ValueError(f"figure {name!r} has defects a reader would see:\n  " + "\n  ".join(defects))
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
