"""Small plotting helpers shared by the chapters: one look for every figure of the book."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["figure"]


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
