"""The three things every chapter does: state a number in the prose, check a claim, draw a named figure.

* :func:`state` glues a computed number into the prose (``{glue:text}`name``) and returns it formatted;
* :func:`check` prints a claim with its margin and asserts it, so the printed line and the assertion agree;
* :func:`figure` opens a figure whose title is the question it answers; :func:`show` glues it under a name
  that a ``{glue:figure}`` directive captions and labels, so the prose cites it with ``{numref}``.

Outside a notebook build (plain Python) gluing is skipped and the values are still returned.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["check", "figure", "show", "state"]


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
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: refusing to state a non-finite number ({value})")
    text = value if isinstance(value, str) else format(value, fmt)
    _glue(name, text)
    return text


def check(claim: str, holds: bool, margin: float | None = None, fmt: str = ".3g") -> None:
    """Print ``claim`` with its ``margin`` (how far from failing), then assert it holds."""
    suffix = "" if margin is None else f" (margin {margin:{fmt}})"
    print(f"{'holds' if holds else 'FAILS'}: {claim}{suffix}")
    assert holds, f"check failed: {claim}{suffix}"


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
