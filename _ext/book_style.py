"""Sphinx extension for the book: an author-year reference list to match the citations, one copy of each
script, inline formulas kept on one line with their brackets and punctuation, the landing page's figure taken
from a chapter's stored outputs, and each unnumbered page's figures and tables numbered from 1."""

from __future__ import annotations

import base64
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import nbformat
from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle as AuthorYearTitleSort
from sphinx.application import Sphinx


def _last_name(person) -> str:
    """A person's last name as plain text (``Peyr{\\'e}`` -> ``Peyré``)."""
    return str(Text.from_latex(" ".join(person.prelast_names + person.last_names)))


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels ``Kim et al., 2021`` / ``Golub and Van Loan, 2013``: what the text cites, the list shows.

    Two works with the same label get the years ``2023a``, ``2023b`` in the list's order; the suffix is
    written into the entry's year, so the citations in the text carry it too.
    """

    def format_labels(self, sorted_entries: Iterable) -> Iterator[str]:
        entries = list(sorted_entries)
        labels = [self.format_label(entry) for entry in entries]
        counts = Counter(labels)
        seen: Counter[str] = Counter()
        for entry, label in zip(entries, labels, strict=True):
            if counts[label] > 1:
                seen[label] += 1
                suffix = "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
                entry.fields["year"] += suffix
                label += suffix
            yield label

    def format_label(self, entry) -> str:
        names = [_last_name(p) for p in entry.persons.get("author", entry.persons.get("editor", []))]
        who = f"{names[0]} et al." if len(names) > 2 else " and ".join(names) or entry.key
        return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(UnsrtStyle):
    """The unsrt entry format, sorted by author then year, labelled author-year."""

    default_label_style = "author_year"
    default_sorting_style = "author_year_title"


def drop_repeated_scripts(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Jupyter Book 1.0 adds sphinx-thebe's inline ``const THEBE_JS_URL`` twice (once with the file name
    ``None``, once ``""``): a SyntaxError on every page. Keep the first of each script."""
    seen, kept = set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


# An inline formula with the bracket before it, the punctuation after it, or a relation and short glued value after it:
# "(" + "$R = 100$", "$1/2$" + ".", "$n$" + " = 8".
_MATH_WITH_PUNCTUATION = re.compile(
    r'(\(?)(<span class="math notranslate nohighlight">\\\([^<]*?\\\)</span>)'
    # "$n$ = {glue:text}`…`": the relation and a short glued value stay with the formula
    r'((?: (?:=|&lt;|&gt;|≤|≥|≈) <span class="pasted-text">[^<]{1,16}</span>)?[.,;:!?)\]]*)')


def keep_math_with_punctuation(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """A line never breaks between an inline formula and the bracket before it, the punctuation after it or a
    relation and short glued value after it (a browser may break around the formula's box, leaving "(" at a
    line's end, "." at the next's start, or "$n$" and "= 8" on two lines): each such group is wrapped in a span
    that does not wrap (``book.css``)."""
    if "body" not in context:
        return

    def wrap(match: re.Match) -> str:
        before, formula, after = match.groups()
        if not (before or after):
            return formula
        return f'<span class="math-nowrap">{before}{formula}{after}</span>'

    context["body"] = _MATH_WITH_PUNCTUATION.sub(wrap, context["body"])


# A model's name that a browser would break at its hyphen ("random GPT-" above "2" in a narrow table cell).
_HYPHENATED_NAME = re.compile(r"(?<![\w-])GPT-2(?![\w-])")
_TEXT_BETWEEN_TAGS = re.compile(r">([^<]+)<")


def keep_names_whole(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """A line never breaks inside a hyphenated model name: each, in the page's text (never inside a tag), is
    wrapped in a span that does not wrap (``book.css``)."""
    if "body" not in context:
        return

    def text(match: re.Match) -> str:
        return ">" + _HYPHENATED_NAME.sub(r'<span class="nowrap">\g<0></span>', match.group(1)) + "<"

    context["body"] = _TEXT_BETWEEN_TAGS.sub(text, context["body"])


def extract_landing_figure(app: Sphinx) -> None:
    """Write the figure (SVG or PNG) that a chapter's cell stored or glued (``landing_figure``: notebook and a
    phrase of the cell's code) to ``_build/landing/figure.svg`` or ``.png``, so the landing page
    (``figure.*``) shows the chapter's own figure of this build."""
    notebook, phrase = app.config.landing_figure["notebook"], app.config.landing_figure["cell_contains"]
    nb = nbformat.read(Path(app.srcdir) / notebook, as_version=4)
    images = [
        (kind, data[key])
        for cell in nb.cells
        if cell.cell_type == "code" and phrase in cell.source
        for output in cell.get("outputs", [])
        for data in (output.get("data", {}),)
        for kind in ("svg+xml", "png")
        for key in (f"image/{kind}", f"application/papermill.record/image/{kind}")  # shown, or glued by show
        if key in data
    ]
    if not images:
        raise ValueError(f"landing_figure: no stored figure output in a cell of {notebook} containing {phrase!r}")
    folder = Path(app.srcdir) / "_build" / "landing"
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("figure.*"):
        stale.unlink()
    kind, data = images[0]
    if kind == "png":
        (folder / "figure.png").write_bytes(base64.b64decode(data))
    else:
        (folder / "figure.svg").write_text(data if isinstance(data, str) else "".join(data))


def exclude_paired_sources(app: Sphinx, config) -> None:
    """A chapter is built from its .ipynb (stored outputs), never from the paired .md of the same name."""
    book = Path(app.srcdir) / "book"
    config.exclude_patterns += [f"book/{p.name}" for p in sorted(book.glob("*.md")) if p.with_suffix(".ipynb").exists()]


def number_unnumbered_pages_apart(app: Sphinx, env) -> list[str]:
    """Figures and tables of a page outside the numbered parts (the landing and at-a-glance pages) are numbered
    from 1 on that page, not on from the previous such page (Sphinx shares one counter among them)."""
    for docname, kinds in env.toc_fignumbers.items():
        if env.toc_secnumbers.get(docname):
            continue
        for numbers in kinds.values():
            for k, key in enumerate(sorted(numbers, key=numbers.get), start=1):
                numbers[key] = (k,)
    return []


def setup(app: Sphinx) -> dict[str, bool]:
    app.connect("config-inited", exclude_paired_sources)
    app.add_config_value("landing_figure", {}, "env")
    app.connect("builder-inited", extract_landing_figure)
    app.connect("html-page-context", drop_repeated_scripts, priority=900)
    app.connect("html-page-context", keep_math_with_punctuation)
    app.connect("html-page-context", keep_names_whole)
    # after Sphinx's own numbering of figures (priority 500)
    app.connect("env-get-updated", number_unnumbered_pages_apart, priority=900)
    register_plugin("pybtex.style.labels", "author_year", AuthorYearLabelStyle)
    register_plugin("pybtex.style.sorting", "author_year_title", AuthorYearTitleSort, force=True)
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
