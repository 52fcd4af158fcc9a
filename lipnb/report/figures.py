"""Figures a reader can read: a question as the title, text at least 80% of the body's, nothing overprinted.

:func:`figure` opens a figure as wide as the book's column at most (panels in rows and columns) with text
sized for it; :func:`show` raises any text still smaller than :data:`MIN_TEXT_PX` on the page to that size,
refuses a figure with a defect a reader would see (:func:`figure_defects`) and glues it as SVG under a name
that a ``{glue:figure}`` directive captions and labels, so the prose cites it with ``{numref}``. Defects:
tick labels that overprint each other, text of one panel or colour bar on another's (a colour bar's ticks
over the next panel's, two y labels on each other), an axis offset text ("+2.771e1") on a title, a legend
entry whose artist draws nothing inside its axes, text smaller than :data:`MIN_TEXT_PX` as displayed; and,
judged against the plotted data's own pixels rather than the axes' box (STYLE.md F2), a legend, an axes' text
or a colour bar (or inset) drawn over the lines, points, bars, bands or image of an axes, and text or a legend
cut at the canvas edge.
"""

from __future__ import annotations

import io
import re
import warnings
from itertools import combinations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.collections import Collection, PolyCollection, QuadMesh
from matplotlib.container import Container
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.layout_engine import TightLayoutEngine
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.path import Path
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import Bbox

__all__ = ["BODY_PX", "COLUMN_PX", "MIN_TEXT_PX", "figure", "figure_defects", "plain_ticks", "show"]

# The page: the text column is 672 CSS px wide and body text 16 px; a figure is shown at its SVG size
# (96 px per inch) or shrunk to the column, and its smallest text must read at 80% of the body text.
COLUMN_PX, BODY_PX = 672, 16
MIN_TEXT_PX = 0.8 * BODY_PX
COLUMN_IN = COLUMN_PX / 96


def _shown_px(fig: Figure, points: float) -> float:
    """How tall text of ``points`` pt reads on the page, once the figure is shrunk to the column."""
    return points * 96 / 72 * min(1.0, COLUMN_IN / fig.get_figwidth())


def figure(title: str, *, ncols: int = 1, nrows: int = 1, width: float = 6.0, height: float = 3.6,
           sharey: bool = False, sharex: bool = False) -> tuple[Figure, Axes | list[Axes]]:
    """A figure whose title is the question it answers: ``nrows`` x ``ncols`` panels (a list unless one).

    ``width`` is one panel's (several share the column: the figure is never wider than :data:`COLUMN_IN`);
    ``height`` one row's. Small multiples of one plot go in rows and columns rather than one wide row.
    """
    total = min(width * (1 if ncols == 1 else ncols * 0.75), COLUMN_IN)
    fig, axes = plt.subplots(nrows, ncols, figsize=(total, height * nrows), sharey=sharey, sharex=sharex,
                             squeeze=False)
    fig.suptitle(title, fontsize=11)
    panels = list(axes.flat)
    for ax in panels:
        ax.grid(True, which="both", alpha=0.25)
        ax.set_axisbelow(True)  # the grid behind bars and shaded bands, not over them
    return fig, panels[0] if len(panels) == 1 else panels


def plain_ticks(axis: Axis, subs: tuple[float, ...] | None = None) -> None:
    """Label ``axis`` with plain numbers (0.5, 10, 200), never a power of ten or an offset, and no minor labels;
    on a log axis ``subs`` places the labels at those multiples of each power of ten (1, 2, 5: 10, 20, 50)."""
    if subs is not None:
        axis.set_major_locator(LogLocator(subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


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


def _drawn_tick_labels(axis: Axis, renderer) -> list[tuple[Text, Bbox]]:
    """Every drawn tick label of ``axis`` (major and minor, both sides) inside its axes' span, with its box."""
    span = axis.axes.get_window_extent(renderer)
    lo, hi = (span.x0, span.x1) if axis.axis_name == "x" else (span.y0, span.y1)
    drawn = []
    for label in axis.get_ticklabels(which="both"):
        box = _text_box(label, renderer)
        if box is None:
            continue
        centre = (box.x0 + box.x1) / 2 if axis.axis_name == "x" else (box.y0 + box.y1) / 2
        if lo - 1 <= centre <= hi + 1:  # a tick outside the view limits is not drawn
            drawn.append((label, box))
    return drawn


def _tick_label_boxes(axis: Axis, renderer) -> list[tuple[str, Bbox]]:
    """The drawn tick labels of ``axis`` as read ("$\\mathdefault{3\\times10^{0}}$" -> "3\\times10^{0}")."""
    return [(re.sub(r"^\$\\mathdefault\{(.*)\}\$$", r"\1", label.get_text()), box)
            for label, box in _drawn_tick_labels(axis, renderer)]


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


def _texts(ax: Axes, renderer) -> list[tuple[str, Bbox]]:
    """Every drawn text of ``ax`` that belongs to it: tick labels, axis labels, title, offsets."""
    found = [(f"{axis.axis_name} tick label '{text}'", box) for axis in (ax.xaxis, ax.yaxis)
             for text, box in _tick_label_boxes(axis, renderer)]
    for label in (ax.xaxis.label, ax.yaxis.label, ax.title, ax._left_title, ax._right_title,
                  ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()):
        box = _text_box(label, renderer)
        if box is not None:
            found.append((f"'{label.get_text()}'", box))
    return found


def _name(k: int, ax: Axes) -> str:
    kind = "colour bar" if hasattr(ax, "_colorbar") else "axes"
    return f"{kind} {k}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")


# Text of two panels closer than this (pixels) reads as one: two titles that touch, "V = I rescaled y".
_GAP_PX = 8.0


def _widened(box: Bbox) -> Bbox:
    """``box`` with half of :data:`_GAP_PX` more on either side along the line of text."""
    return Bbox.from_extents(box.x0 - _GAP_PX / 2, box.y0, box.x1 + _GAP_PX / 2, box.y1)


def _neighbour_defects(fig: Figure, renderer) -> list[str]:
    """Text of one axes (or colour bar) drawn over, or touching, another's text, or inside its plotting area."""
    defects = []
    drawn = [(k, ax, _texts(ax, renderer), ax.get_window_extent(renderer)) for k, ax in enumerate(fig.axes)
             if ax.get_visible()]
    for (i, a, texts_a, frame_a), (j, b, texts_b, frame_b) in combinations(drawn, 2):
        if _overlap(frame_a, frame_b):
            continue  # an inset, or axes drawn on purpose over another (twinx): not neighbours
        for what_a, box_a in texts_a:
            for what_b, box_b in texts_b:
                if _overlap(_widened(box_a), _widened(box_b)):
                    defects.append(f"{_name(i, a)}'s {what_a} and {_name(j, b)}'s {what_b} overprint or touch")
        for (k, ax, texts), frame in (((i, a, texts_a), frame_b), ((j, b, texts_b), frame_a)):
            other = _name(j, b) if ax is a else _name(i, a)
            defects += [f"{_name(k, ax)}'s {what} is drawn inside {other}" for what, box in texts
                        if _overlap(box, frame)]
    return defects


def _all_texts(fig: Figure) -> list[Text]:
    """Every text the figure draws: titles, labels, drawn tick labels, legends, annotations."""
    renderer = fig.canvas.get_renderer()
    texts = [*fig.texts, *(t for legend in fig.legends for t in (*legend.get_texts(), legend.get_title()))]
    texts += [fig._suptitle] if fig._suptitle else []
    for ax in fig.axes:
        texts += [t for axis in (ax.xaxis, ax.yaxis) for t, _ in _drawn_tick_labels(axis, renderer)]
        texts += [ax.xaxis.label, ax.yaxis.label, ax.title, ax._left_title, ax._right_title, *ax.texts]
        if ax.get_legend():
            texts += [*ax.get_legend().get_texts(), ax.get_legend().get_title()]
    unique = {id(t): t for t in texts}  # the suptitle is also one of fig.texts
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def _small_text(fig: Figure) -> list[str]:
    """Text that reads smaller than :data:`MIN_TEXT_PX` on the page (the figure shrunk to the column)."""
    return [f"text {t.get_text()!r} is {t.get_fontsize():.3g} pt: {_shown_px(fig, t.get_fontsize()):.1f} px on "
            f"the page, below {MIN_TEXT_PX:.1f} px (80% of the body text)" for t in _all_texts(fig)
            if _shown_px(fig, t.get_fontsize()) < MIN_TEXT_PX - 1e-9]


def _runs(xy: np.ndarray) -> list[np.ndarray]:
    """The finite stretches of a polyline ``xy`` (a NaN breaks a drawn line in two)."""
    finite = np.isfinite(xy).all(axis=1)
    cuts = np.flatnonzero(np.diff(finite.astype(int))) + 1
    return [run for run in np.split(xy, cuts) if len(run) and np.isfinite(run).all()]


def _hit_points(xy: np.ndarray, box: Bbox, radius: float) -> bool:
    """Whether any point of ``xy`` (display px) drawn with ``radius`` px reaches into ``box``."""
    xy = xy[np.isfinite(xy).all(axis=1)]
    return bool(np.any((xy[:, 0] + radius > box.x0) & (xy[:, 0] - radius < box.x1)
                       & (xy[:, 1] + radius > box.y0) & (xy[:, 1] - radius < box.y1)))


def _in_data(artist: Artist, ax: Axes) -> bool:
    """Whether ``artist`` is placed in ``ax``'s data coordinates (a scatter by its offsets), not across the axes
    (``axhline``, ``axvspan``: references, not data)."""
    if artist.get_transform().contains_branch(ax.transData):
        return True
    return isinstance(artist, Collection) and artist.get_offset_transform().contains_branch(ax.transData)


def _data_artists(ax: Axes) -> list[Artist]:
    """What ``ax`` plots in its data coordinates: lines, markers, collections (scatter, error bars, bands, meshes),
    images and patches (bars)."""
    return [a for a in (*ax.lines, *ax.collections, *ax.images, *ax.patches)
            if a.get_visible() and a.get_alpha() != 0 and _in_data(a, ax)]


def _describe(artist: Artist) -> str:
    label = artist.get_label()
    kind = {"Line2D": "line", "AxesImage": "image", "PathCollection": "points", "LineCollection": "lines",
            "PolyCollection": "band", "QuadMesh": "heat map", "Rectangle": "bar"}.get(type(artist).__name__,
                                                                                   type(artist).__name__)
    return f"the {kind} {label!r}" if label and not label.startswith("_") else f"the {kind}"


def _covers(artist: Artist, box: Bbox, renderer) -> bool:
    """Whether ``artist`` draws ink inside ``box`` (display px, already clipped to its axes)."""
    dpi = artist.figure.dpi
    if isinstance(artist, Line2D):
        xy = artist.get_transform().transform(np.asarray(artist.get_xydata(), dtype=float))
        marker = artist.get_marker() not in (None, "None", "", " ") and artist.get_markersize() > 0
        if marker and _hit_points(xy, box, artist.get_markersize() * dpi / 72 / 2):
            return True
        drawn = artist.get_linestyle() not in ("None", "", " ") and artist.get_linewidth() > 0
        return drawn and any(Path(run).intersects_bbox(box, filled=False) for run in _runs(xy) if len(run) > 1)
    if isinstance(artist, Collection):
        offsets = np.asarray(artist.get_offsets(), dtype=float)
        sizes = getattr(artist, "get_sizes", lambda: np.array([]))()
        if len(offsets) and len(sizes) and not isinstance(artist, (QuadMesh, PolyCollection)):
            xy = artist.get_offset_transform().transform(offsets)
            return _hit_points(xy, box, float(np.sqrt(np.max(sizes))) * dpi / 72 / 2)
        if isinstance(artist, QuadMesh):
            seen = Bbox.intersection(artist.get_window_extent(renderer), box)
            return seen is not None and seen.width > _OVERLAP_PX and seen.height > _OVERLAP_PX
        transform = artist.get_transform()
        filled = isinstance(artist, PolyCollection)
        return any(transform.transform_path(path).intersects_bbox(box, filled=filled)
                   for path in artist.get_paths())
    if isinstance(artist, AxesImage):
        seen = Bbox.intersection(artist.get_window_extent(renderer), box)
        return seen is not None and seen.width > _OVERLAP_PX and seen.height > _OVERLAP_PX
    if isinstance(artist, Patch):
        return artist.get_transform().transform_path(artist.get_path()).intersects_bbox(box, filled=artist.get_fill())
    return False


def _data_under(ax: Axes, box: Bbox, renderer, images: bool = True) -> str | None:
    """What of ``ax``'s plotted data lies under ``box`` (display px), named; None when nothing does. With
    ``images=False`` images and meshes do not count (a heat map's cells may carry their values)."""
    seen = Bbox.intersection(box, ax.get_window_extent(renderer))
    if seen is None or seen.width <= _OVERLAP_PX or seen.height <= _OVERLAP_PX:
        return None
    inner = Bbox.from_extents(seen.x0 + _OVERLAP_PX, seen.y0 + _OVERLAP_PX, seen.x1 - _OVERLAP_PX,
                              seen.y1 - _OVERLAP_PX)
    return next((_describe(a) for a in _data_artists(ax) if (images or not isinstance(a, (AxesImage, QuadMesh)))
                 and _covers(a, inner, renderer)), None)


def _over_data_defects(fig: Figure, renderer) -> list[str]:
    """A legend, colour bar, inset or text drawn over plotted data: a legend (of an axes or the figure) over the
    lines, points, bars, bands or image of any axes; an axes' own text (``ax.text``, ``annotate``) over its lines,
    points, bars or bands (a heat map's cells may carry their values); a colour bar or an axes drawn over another
    axes' data (twins, which share their frame, are not)."""
    defects = []
    panels = [(k, ax) for k, ax in enumerate(fig.axes) if ax.get_visible()]
    legends = [(f"the legend of {_name(k, ax)}", ax.get_legend()) for k, ax in panels if ax.get_legend()]
    legends += [("the figure's legend", legend) for legend in fig.legends]
    for what, legend in legends:
        if not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        defects += [f"{what} is drawn over {hit} of {_name(k, ax)}" for k, ax in panels
                    if (hit := _data_under(ax, box, renderer))]
    for k, ax in panels:
        for text in ax.texts:
            box = _text_box(text, renderer)
            hit = box is not None and _data_under(ax, box, renderer, images=False)
            if hit:
                defects.append(f"{_name(k, ax)}'s text {text.get_text()!r} is drawn over {hit}")
    for (i, a), (j, b) in ((x, y) for x in panels for y in panels if x[0] != y[0]):
        frame = a.get_window_extent(renderer)
        if np.allclose(frame.extents, b.get_window_extent(renderer).extents):
            continue  # twins share their frame
        if hasattr(a, "_colorbar") or _inside(frame, b.get_window_extent(renderer)):
            hit = _data_under(b, frame, renderer)
            if hit:
                defects.append(f"{_name(i, a)} is drawn over {hit} of {_name(j, b)}")
    return defects


def _inside(inner: Bbox, outer: Bbox) -> bool:
    """Whether ``inner`` lies within ``outer`` (an inset)."""
    return inner.x0 >= outer.x0 and inner.x1 <= outer.x1 and inner.y0 >= outer.y0 and inner.y1 <= outer.y1


def _cut_defects(fig: Figure, renderer) -> list[str]:
    """Text or a legend cut at the canvas edge: drawn partly outside the figure, which the stored SVG cuts off."""
    canvas = fig.bbox
    cut = []
    for text in _all_texts(fig):
        box = _text_box(text, renderer)
        if box is not None and (box.x0 < canvas.x0 - 1 or box.x1 > canvas.x1 + 1 or box.y0 < canvas.y0 - 1
                                or box.y1 > canvas.y1 + 1):
            cut.append(f"text {text.get_text()!r} is cut at the canvas edge")
    for legend in [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends):
        box = legend.get_window_extent(renderer)
        if legend.get_visible() and (box.x0 < canvas.x0 - 1 or box.x1 > canvas.x1 + 1 or box.y0 < canvas.y0 - 1
                                     or box.y1 > canvas.y1 + 1):
            cut.append("a legend is cut at the canvas edge")
    return cut


def figure_defects(fig: Figure) -> list[str]:
    """What a reader would see wrong in ``fig`` once drawn: overprinted tick labels, text of one panel or
    colour bar on another's, an axis offset text on a title, a legend entry whose artist draws nothing
    inside its axes, a legend, text or colour bar over plotted data, text cut at the canvas edge, text too
    small to read on the page. Empty when the figure is clean."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    defects = []
    titles = [t for parent in (fig, *fig.axes) for t in parent.get_children() if isinstance(t, Text)]
    title_boxes = [(t.get_text(), box) for t in titles if (box := _text_box(t, renderer)) is not None]
    for k, ax in enumerate(fig.axes):
        where = _name(k, ax)
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
    return (defects + _neighbour_defects(fig, renderer) + _over_data_defects(fig, renderer)
            + _cut_defects(fig, renderer) + _small_text(fig))



def _enlarge_small_text(fig: Figure) -> bool:
    """Raise every text that would read below :data:`MIN_TEXT_PX` on the page to that size; whether any was."""
    points = MIN_TEXT_PX / _shown_px(fig, 1.0)
    small = [text for text in _all_texts(fig) if text.get_fontsize() < points]
    for text in small:
        text.set_fontsize(points)
    return bool(small)


def show(name: str, fig: Figure) -> Figure:
    """Glue ``fig`` as SVG under ``name`` for a captioned ``{glue:figure}`` and close it (drawn once, there).

    Text too small for the page is first raised to :data:`MIN_TEXT_PX` (and a figure without a layout engine
    laid out again); raises ``ValueError`` listing :func:`figure_defects` when the drawn figure has any.
    """
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"glue name {name!r} must be non-empty letters, digits, '_' or '-'")
    fig.canvas.draw()
    engine = fig.get_layout_engine()
    if _enlarge_small_text(fig) and (engine is None or isinstance(engine, TightLayoutEngine)):
        # Axes tight_layout cannot place (a colour bar's) keep their place; what then overlaps is a defect below.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "This figure includes Axes that are not compatible", UserWarning)
            fig.tight_layout()
    defects = figure_defects(fig)
    if defects:
        plt.close(fig)
        raise ValueError(f"figure {name!r} has defects a reader would see:\n  " + "\n  ".join(defects))
    try:
        from IPython.display import SVG
        from myst_nb import glue
    except ImportError:
        plt.close(fig)
        return fig
    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": "lipnb", "svg.fonttype": "path"}):  # the same bytes on every run
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    glue(name, SVG(data=buffer.getvalue()), display=False)
    plt.close(fig)
    return fig
