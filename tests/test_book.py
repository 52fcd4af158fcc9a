"""The book's structure: every chapter is a jupytext pair whose .md and .ipynb hold the same cells."""

from __future__ import annotations

from pathlib import Path

import jupytext
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
