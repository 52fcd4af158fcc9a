"""Tables a reader reads: :func:`markdown_table` shows rows as a captioned table (MyST Markdown, rendered as an
HTML table whose cells may hold links and math), :func:`frame_table` a pandas DataFrame, :func:`summary_table` a
few rows with the whole table folded below."""

from __future__ import annotations

import html
import math
import re

import numpy as np

from .numbers import as_written

__all__ = ["Table", "frame_table", "markdown_table", "summary_table"]


class Table:
    """A table shown as MyST Markdown (the book renders a captioned HTML table); ``to_html`` for a folded block."""

    def __init__(self, markdown: str, html_table: str) -> None:
        self.data = markdown
        self._html = html_table

    def _repr_markdown_(self) -> str:
        return self.data

    def __repr__(self) -> str:
        return self.data

    def to_html(self) -> str:
        """The table as plain HTML (links and math left as written), for :func:`ledger`'s folded block."""
        return self._html


def _rows(rows: object) -> list[dict[str, object]]:
    if hasattr(rows, "to_dict"):  # a pandas DataFrame
        rows = rows.to_dict("records")
    rows = list(rows)
    if not rows:
        raise ValueError("markdown_table: no rows")
    columns = list(rows[0])
    if any(list(row) != columns for row in rows):
        raise ValueError("markdown_table: every row must have the same columns, in the same order")
    return rows


def _cells(rows: list[dict[str, object]], formats: dict[str, str]) -> list[list[str]]:
    def cell(column: str, value: object) -> str:
        if value is None or (isinstance(value, (float, np.floating)) and math.isnan(value)):
            return "–"  # no value: a dash, never "None" or "nan"
        if isinstance(value, (float, np.floating)) or (isinstance(value, (int, np.integer)) and column in formats):
            return as_written(format(value, formats.get(column, ".3g")))
        return as_written(str(value).replace("\n", " "))

    return [[cell(c, row[c]) for c in row] for row in rows]


def frame_table(table: object, caption: str, fmt: str = ".3g", *, name: str = "", numbered: bool = True) -> Table:
    """A pandas DataFrame as :func:`markdown_table`: its index as leading columns (none for a plain range index),
    a multi-level column's levels joined by ", ", every float column formatted with ``fmt``."""
    if not hasattr(table, "reset_index") or not hasattr(table, "dtypes"):
        raise TypeError(f"frame_table: a pandas DataFrame, not {type(table).__name__}")
    plain = type(table.index).__name__ == "RangeIndex"
    flat = table if plain else table.reset_index()
    flat = flat.set_axis([", ".join(str(c) for c in col if c != "") if isinstance(col, tuple)
                          else "" if col == "index" else str(col) for col in flat.columns], axis=1)
    formats = {column: fmt for column, dtype in zip(flat.columns, flat.dtypes, strict=True) if dtype.kind == "f"}
    return markdown_table(flat.to_dict("records"), formats, caption=caption, name=name, numbered=numbered)


# Markdown emphasis ("*Alice*", a book's title) as the folded HTML copy sets it; "2 * 3" and "a*b" are left alone.
_EMPHASIS = re.compile(r"(?<![*\w])\*(?=[^*\s])([^*]+?)(?<=[^*\s])\*(?![*\w])")


def _html(text: str) -> str:
    """A cell, header or caption as HTML: escaped, with its Markdown italics in ``<em>``."""
    return _EMPHASIS.sub(r"<em>\1</em>", html.escape(text))


def markdown_table(rows: object, formats: dict[str, str] | None = None, *, caption: str = "",
                   name: str = "", numbered: bool = True) -> Table:
    """``rows`` (one dict per row, same keys, or a DataFrame) as a captioned table for ``display``.

    ``caption`` says what the cells are (e.g. "fitted exponent [95% bootstrap interval]"); a table without
    one is flagged by the book's tests. ``name`` labels it for ``{numref}``. Cells are text as given (so they
    may hold ``{ref}`` links or ``$math$``); numbers are formatted with the column's format (default ``.3g``);
    a missing value (None, NaN) is a dash. A ``|`` inside a cell is escaped, and LaTeX's ``\\|`` written ``\\Vert``.

    ``numbered=False`` is for a table the chapter folds (a hidden output): it is shown as an HTML table with its
    caption, which the book does not number, so the numbers of the tables a reader sees run on without a gap. Its
    caption and cells are plain text (no ``$math$``, no roles), and it cannot be named.
    """
    rows = _rows(rows)
    columns, cells = list(rows[0]), _cells(rows, formats or {})
    if not isinstance(caption, str) or not isinstance(name, str):
        raise TypeError("markdown_table: caption and name are text")
    caption = as_written(caption)
    if not isinstance(numbered, bool):
        raise TypeError("markdown_table: numbered is True or False")
    if not numbered and (name or not caption.strip()):
        raise ValueError("markdown_table: an unnumbered table has a caption and no name (nothing can cite it)")
    if not numbered and any("$" in t or "{" in t for t in [caption, *columns, *(c for row in cells for c in row)]):
        raise ValueError("markdown_table: an unnumbered table is plain HTML: no $math$ or {role} in its text")

    def escape(text: str) -> str:
        # A table cell cannot hold a bare "|": LaTeX's norm "\|" becomes "\Vert", any other "|" is escaped.
        return text.replace("\\|", "\\Vert ").replace("|", "\\|")

    lines = ["| " + " | ".join(map(escape, columns)) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(map(escape, row)) + " |" for row in cells]
    markdown = "\n".join(lines)
    if caption or name:
        label = f":name: {name}\n" if name else ""
        markdown = f":::{{table}} {' '.join(caption.split())}\n{label}\n{markdown}\n:::"
    body = "".join("<tr>" + "".join(f"<td>{_html(c)}</td>" for c in row) + "</tr>" for row in cells)
    head = "".join(f"<th>{_html(c)}</th>" for c in columns)
    table = (f"<table><caption>{_html(caption)}</caption><thead><tr>{head}</tr></thead>"
             f"<tbody>{body}</tbody></table>")
    if not numbered:
        return Table(table.replace("<table>", '<table class="table">', 1), table)
    return Table(markdown, table)


def summary_table(rows: object, full: object, formats: dict[str, str] | None = None, *, caption: str,
                  name: str = "") -> Table:
    """A few rows a reader reads (``rows``), captioned, with the whole table (``full``) folded below it.

    For a frame of dozens of rows: choose the rows that answer the question (one per model, the extremes);
    the full table stays one click away, in a dropdown titled as the whole of the table above. The folded copy has
    no caption of its own, so the book does not number it: the table numbers a reader sees run on without a gap.
    """
    shown, whole = markdown_table(rows, formats, caption=caption, name=name), _rows(full)
    folded = markdown_table(whole, formats)
    title = f"All {len(whole)} rows of the table above"
    markdown = f"{shown.data}\n\n::::{{dropdown}} {title}\n{folded.data}\n::::"
    return Table(markdown, shown.to_html() + f"<p>{html.escape(title)}</p>" + folded.to_html())
