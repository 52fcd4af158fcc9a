"""The book's structure: every chapter is a jupytext pair whose .md and .ipynb hold the same cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("[0-9]*.md"))


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


def test_chapters_are_numbered_in_the_sidebar() -> None:
    parts = yaml.safe_load((ROOT / "_toc.yml").read_text()).get("parts", [])
    with_chapters = [p for p in parts if any(re.match(r"book/\d", c["file"]) for c in p["chapters"])]
    unnumbered = [p["caption"] for p in with_chapters if not p.get("numbered")]
    assert with_chapters and not unnumbered, f"_toc.yml: give {unnumbered} `numbered: true`"


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
def test_nbval_markers_are_tags_not_code(chapter: Path) -> None:
    """A `# NBVAL_CHECK_OUTPUT` comment prints in the rendered code; the cell tag `nbval-check-output` does not."""
    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    marked = [n for n, c in enumerate(code, 1) if "NBVAL_CHECK_OUTPUT" in c.source]
    assert not marked, f"{chapter.name}: code cells {marked} carry the comment: use `:tags: [nbval-check-output]`"


def test_no_chapter_stores_widget_state() -> None:
    """Widget state in a notebook makes the built page load require.js and the widget manager from a CDN,
    which the offline book must not do (a progress bar shown while a chapter ran leaves it behind)."""
    stored = [p.name for p in sorted((Path(__file__).resolve().parents[1] / "book").glob("*.ipynb"))
              if "widgets" in json.loads(p.read_text())["metadata"]]
    assert not stored, f"widget state stored in {stored}: strip metadata.widgets and find the progress bar"
