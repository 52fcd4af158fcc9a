"""The book's structure: every chapter is a jupytext pair whose .md and .ipynb hold the same cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# A chapter is a page with a paired notebook (intro.md and references.md have none).
CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists())


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


# The parts of _toc.yml that are not numbered: the pages read before Part I and the back matter.
FRONT_AND_BACK = ("At a glance", "Back matter")


def test_every_part_is_numbered_in_the_sidebar() -> None:
    """Every part between the front and the back matter is numbered and captioned "Part I: ...", in order."""
    parts = yaml.safe_load((ROOT / "_toc.yml").read_text()).get("parts", [])
    body = [p for p in parts if p["caption"] not in FRONT_AND_BACK]
    unnumbered = [p["caption"] for p in body if not p.get("numbered")]
    assert body and not unnumbered, f"_toc.yml: give {unnumbered} `numbered: true`"
    romans = [re.match(r"Part ([IVX]+): ", p["caption"]) for p in body]
    assert all(romans) and [r[1] for r in romans] == ["I", "II", "III", "IV", "V", "VI"][: len(body)], \
        f"_toc.yml: parts are captioned 'Part I: ...', 'Part II: ...' in order, not {[p['caption'] for p in body]}"


def test_every_chapter_is_in_the_toc() -> None:
    listed = {Path(f).with_suffix("").as_posix() for f in _toc_files()}
    for chapter in CHAPTERS:
        assert chapter.relative_to(ROOT).with_suffix("").as_posix() in listed, chapter.name


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_chapter_pair_agrees(chapter: Path) -> None:
    """The .md (source of truth) and its .ipynb (with stored outputs for nbval) hold the same cells."""
    paired = chapter.with_suffix(".ipynb")
    assert paired.exists(), f"{paired.name} is missing: run `make notebooks`"
    md, nb = jupytext.read(chapter), jupytext.read(paired)
    assert md.metadata["kernelspec"]["name"] == "python3"
    md_cells = [(c.cell_type, c.source.strip()) for c in md.cells]
    nb_cells = [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert md_cells == nb_cells, f"{chapter.name} and {paired.name} differ: run `make notebooks`"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_chapter_outputs_are_stored(chapter: Path) -> None:
    """nbval compares stored outputs: a code cell without any would make the comparison vacuous."""
    nb = jupytext.read(chapter.with_suffix(".ipynb"))
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), f"{chapter.name}: re-run `make notebooks`"


# What a stored output must not show: the build machine's paths, or a memory address that changes every run.
LOCAL_NOISE = re.compile(r"/root\b|/work\b|/home/\w+|\.venv\b|site-packages|\b0x[0-9a-fA-F]{6,}\b")
TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_stored_outputs_hold_no_local_paths_or_addresses(chapter: Path) -> None:
    """Outputs are read on Colab and in any notebook viewer: no machine paths, no run-varying addresses."""
    nb = nbformat.read(chapter.with_suffix(".ipynb"), as_version=4)
    found = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    for number, cell in enumerate(code, 1):
        for output in cell.get("outputs", []):
            texts = [(output.get("name", "stream"), output.get("text", ""))]
            texts += [(mime, output.get("data", {}).get(mime, "")) for mime in TEXT_MIMES]
            texts += [("traceback", "\n".join(output.get("traceback", [])))]
            for where, text in texts:
                text = "".join(text) if isinstance(text, list) else text
                found += [f"code cell {number} ({where}): {line.strip()[:160]}"
                          for line in text.splitlines() if LOCAL_NOISE.search(line)]
    assert not found, f"{chapter.name}: stored outputs show local paths or addresses:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_no_cell_shows_a_stray_value(chapter: Path) -> None:
    """A cell whose last line is a bare ``check.*(...)`` or ``state(...)`` prints its return value (a margin, a
    glued text) under the code as a lone number; the reader sees the check's result in the ledger, not there
    (end such a cell with ``_ = ...``). Results meant to be seen are displayed: figures, tables, HTML."""
    nb = nbformat.read(chapter.with_suffix(".ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    stray = [f"code cell {number}: {output['data']['text/plain'][:60]!r}"
             for number, cell in enumerate(code, 1) for output in cell.get("outputs", [])
             if output.get("output_type") == "execute_result" and set(output.get("data", {})) <= {"text/plain"}]
    assert not stray, f"{chapter.name}: cells show a bare value:\n  " + "\n  ".join(stray)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_nbval_markers_are_tags_not_code(chapter: Path) -> None:
    """A `# NBVAL_CHECK_OUTPUT` comment prints in the rendered code; the cell tag `nbval-check-output` does not."""
    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    marked = [n for n, c in enumerate(code, 1) if "NBVAL_CHECK_OUTPUT" in c.source]
    assert not marked, f"{chapter.name}: code cells {marked} carry the comment: use `:tags: [nbval-check-output]`"


def test_no_chapter_stores_widget_state() -> None:
    """Widget state in a notebook makes the built page load require.js and the widget manager from a CDN,
    which the offline book must not do (a progress bar shown while a chapter ran leaves it behind)."""
    stored = [p.name for p in sorted((Path(__file__).resolve().parents[2] / "book").glob("*.ipynb"))
              if "widgets" in json.loads(p.read_text())["metadata"]]
    assert not stored, f"widget state stored in {stored}: strip metadata.widgets and find the progress bar"


def _code_cells(chapter: Path) -> list:
    return [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]


def _ends_with_its_ledger(chapter: Path) -> bool:
    """A chapter that checks claims shows them: its last code cell calls ``report.ledger()``, input hidden."""
    code = _code_cells(chapter)
    if not any(re.search(r"\bcheck\.\w+\(", c.source) for c in code):
        return True
    last = code[-1]
    return bool(re.search(r"\bledger\(", last.source)) and "remove-input" in last.metadata.get("tags", [])


def test_every_chapter_that_checks_ends_with_its_ledger() -> None:
    """Checks print nothing: a chapter that runs them and never calls ``ledger()`` would show no ledger."""
    missing = [c.name for c in CHAPTERS if not _ends_with_its_ledger(c)]
    assert not missing, ("chapters whose checks are never shown: end each with a code cell "
                         "`lipnb.report.ledger()` tagged `remove-input`:\n  " + "\n  ".join(missing))


def test_the_ledger_check_finds_a_chapter_without_its_ledger(tmp_path: Path) -> None:
    cells = ["```{code-cell} ipython3\ncheck.below('x', 1, 2)\n```\n"]
    header = (CHAPTERS[0].read_text().split("\n---\n")[0]) + "\n---\n\n"
    for tail, ends in (("", False), ("```{code-cell} ipython3\nlipnb.report.ledger()\n```\n", False),
                       ("```{code-cell} ipython3\n:tags: [remove-input]\n\nlipnb.report.ledger()\n```\n", True)):
        path = tmp_path / "01_demo.md"
        path.write_text(header + "\n".join([*cells, tail]))
        assert _ends_with_its_ledger(path) is ends, tail


# Code cells are read in the book's column: a line longer than this wraps or scrolls.
CODE_WIDTH = 80


def test_code_cells_fit_the_column() -> None:
    """Every line of every code cell is at most CODE_WIDTH characters (the failure lists where)."""
    wide = {}
    for chapter in CHAPTERS:
        lines = [line for c in _code_cells(chapter) for line in c.source.splitlines() if len(line) > CODE_WIDTH]
        if lines:
            wide[chapter.name] = f"{len(lines)} lines, longest {max(map(len, lines))}"
    assert not wide, f"code lines wider than {CODE_WIDTH} characters:\n  " + "\n  ".join(
        f"{name}: {what}" for name, what in wide.items())


def _uncaptioned_tables(source: str) -> list[int]:
    """Lines of ``markdown_table(...)`` / ``summary_table(...)`` calls in ``source`` without a ``caption=``."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("markdown_table", "summary_table")
            and not any(k.arg == "caption" for k in node.keywords)]


def test_every_table_has_a_caption() -> None:
    """A table says what its cells are: every ``markdown_table``/``summary_table`` call passes ``caption=``."""
    bare = {c.name: n for c in CHAPTERS if (n := sum(len(_uncaptioned_tables(x.source)) for x in _code_cells(c)))}
    assert not bare, "tables without a caption (count per chapter):\n  " + "\n  ".join(
        f"{name}: {n}" for name, n in bare.items())
    assert _uncaptioned_tables("display(markdown_table(rows))\nreport.summary_table(a, b, caption='x')") == [1]


# A directive whose backtick fence's title holds a backtick is no fence at all (CommonMark): the page then
# shows "```{prf:lemma} ..." as text and the next block as code. Use a colon fence (:::) for such a title.
BROKEN_FENCE = re.compile(r"^(`{3,})\{[\w:-]+\}[^\n]*`", re.M)


def test_no_directive_title_breaks_its_fence() -> None:
    pages = sorted((ROOT / "book").glob("*.md"))
    broken = [f"{p.name}: {m[0][:80]}" for p in pages for m in BROKEN_FENCE.finditer(p.read_text())]
    assert not broken, "backtick fences whose title holds a backtick (use ::: instead):\n  " + "\n  ".join(broken)
    assert BROKEN_FENCE.search("```{prf:lemma} The maximum of {eq}`eq-lambert`\n")


# No page names the work tracker: readers never saw it.
TRACKER = re.compile(r"\b[Ii]ssues?\b(?! of)|(?<![\w&])#\d+\b")


def _prose_lines(page: Path) -> list[tuple[int, str]]:
    """The lines of ``page`` outside its code cells, numbered."""
    lines, in_code = [], False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```{code-cell}"):
            in_code = True
        elif in_code and line.startswith("```"):
            in_code = False
        elif not in_code:
            lines.append((n, line))
    return lines


ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")  # a role's argument (a glued value's key) is not read


def test_no_page_names_the_work_tracker() -> None:
    """The prose of every page: no "issue 23", "#32" (an issue *of* a journal is fine); the browser test
    checks the rendered page, code included."""
    found = [f"{p.name}:{n}: {line.strip()[:100]}" for p in sorted((ROOT / "book").glob("*.md"))
             for n, line in _prose_lines(p) if TRACKER.search(ROLE.sub("", line))]
    assert not found, "pages that name the work tracker:\n  " + "\n  ".join(found)
    assert TRACKER.search("the tenfold the issue asked") and TRACKER.search("see #32")
    assert not TRACKER.search("an issue of the journal") and not TRACKER.search("&#32;")


def test_the_readme_chapter_map_matches_the_toc() -> None:
    """README's chapter map is the one _toc.yml and the chapters' titles give (`python _ext/chapter_map.py`)."""
    import sys

    sys.path.insert(0, str(ROOT / "_ext"))
    from chapter_map import readme_with_map

    readme = (ROOT / "README.md").read_text()
    assert readme == readme_with_map(readme), "README's chapter map is stale: run `python _ext/chapter_map.py`"
