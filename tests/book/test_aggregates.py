"""Every number the pages at a glance and the landing page show agrees with the chapters it comes from.

The pages at a glance are executed after every chapter and read the chapters' stored outputs; the landing page
glues from them. This test recomputes, from the chapters' stored notebooks alone (their ledgers, their glued
values, their correction boxes) and the table of published numbers, every aggregate those pages show: the
number of chapters and of checks, the checks that are equalities, the corrections and sharpenings by kind,
the published numbers by verdict; it compares each value the results page copied from a chapter with what
that chapter stores now, and every value the landing page glues with the page it names. A chapter
re-executed after the pages at a glance, a chapter left out of their table (the way 632 checks in 21
chapters were once shown where the chapters held 686 in 22), or a miscounted correction fails here, and
the message names each disagreement. The last tests plant such disagreements and watch them caught.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from lipnb.experiments import classify_correction
from lipnb.models import HUB_MODELS
from lipnb.paper import PUBLISHED_NUMBERS

ROOT = Path(__file__).resolve().parents[2]
RESULTS, THEOREMS = "results_at_a_glance", "theorems_at_a_glance"
LEDGER_KEY = "lipnb-ledger"
WORDS = {w: n for n, w in enumerate(["no", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                      "nine"])}
# Values the results page computes itself that a chapter also states: the same quantity, one text.
SAME_AS = {
    "adv-pub-alpha": ("audit", "paper-adv-pub-alpha"),
    "adv-pub-low": ("audit", "paper-adv-pub-alpha-low"),
    "adv-pub-high": ("audit", "paper-adv-pub-alpha-high"),
    "adv-est-alpha": ("audit", "paper-adv-est-alpha"),
    "adv-est-low": ("audit", "paper-adv-est-alpha-low"),
    "adv-est-high": ("audit", "paper-adv-est-alpha-high"),
    "real-pub-alpha": ("audit", "paper-real-pub-alpha"),
    "real-pub-low": ("audit", "paper-real-pub-low"),
    "real-pub-high": ("audit", "paper-real-pub-high"),
    "real-true-alpha": ("audit", "paper-real-true-alpha"),
    "real-true-low": ("audit", "paper-real-true-low"),
    "real-true-high": ("audit", "paper-real-true-high"),
}
ADMONITION = re.compile(r"^(?:`{3,}|:{3,})\{admonition\}\s+((?:Correction|Sharpening)\b.*?)\s*$", re.M)
GLUED = re.compile(r"\{glue:text\}`([\w.]+)\.ipynb::([\w-]+)(?::\w*)?`")


def _notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _states(path: Path) -> dict[str, str]:
    """The glued texts of a stored notebook, read from its outputs."""
    out = {}
    for cell in _notebook(path)["cells"]:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            text = output.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                out[name] = "".join(text).strip("'\"")
    return out


def _margins(path: Path) -> list[float]:
    """The margin of every check a stored notebook's ledger holds."""
    return [entry["margin"] for cell in _notebook(path)["cells"] for output in cell.get("outputs", [])
            for entry in output.get("metadata", {}).get(LEDGER_KEY, {}).get("checks", [])]


def _titles(path: Path) -> list[str]:
    """The titles of the correction and sharpening boxes in a stored notebook's text cells."""
    return [title for cell in _notebook(path)["cells"] if cell["cell_type"] == "markdown"
            for title in ADMONITION.findall("".join(cell["source"]))]


def _count(text: str) -> int:
    """The count that opens a glued phrase: "710 checks", "five statements", "no results", "1,024"."""
    first = text.split()[0]
    return WORDS[first] if first in WORDS else int(first.replace(",", ""))


def _chapters(root: Path) -> list[str]:
    """Every page of the table of contents with a stored notebook, in book order, but the pages at a glance."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    stems = [Path(entry["file"]).stem for part in toc["parts"] for entry in part["chapters"]]
    return [s for s in stems if (root / "book" / f"{s}.ipynb").exists() and s not in (RESULTS, THEOREMS)]


def _copied(root: Path) -> dict[str, tuple[str, str]]:
    """The results page's map of the values it copies from chapters, as its stored notebook ran it."""
    for cell in _notebook(root / "book" / f"{RESULTS}.ipynb")["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "FROM_CHAPTERS = {" in source:
            for node in ast.parse(source).body:
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FROM_CHAPTERS":
                    return ast.literal_eval(node.value)
    raise AssertionError(f"{RESULTS}.ipynb: no cell defines FROM_CHAPTERS")


def disagreements(root: Path) -> list[str]:
    """Every aggregate or copied value of the pages at a glance and the landing page that disagrees with its
    sources, as one line each (empty when all agree)."""
    book = root / "book"
    chapters = _chapters(root)
    states = {name: _states(book / f"{name}.ipynb") for name in chapters}
    glance = _states(book / f"{RESULTS}.ipynb")
    found: list[str] = []

    def compare(name: str, shown: str | None, expected: object, count: bool = True) -> None:
        if shown is None:
            found.append(f"{RESULTS} states no {name!r}")
        elif (_count(shown) if count else shown) != expected:
            found.append(f"{RESULTS} shows {name} = {shown!r}, its sources give {expected!r}")

    # The chapters and their checks.
    margins = {name: _margins(book / f"{name}.ipynb") for name in chapters}
    every = [m for name in chapters for m in margins[name]]
    compare("n-chapters", glance.get("n-chapters"), len(chapters))
    compare("n-checks", glance.get("n-checks"), len(every))
    compare("n-check-chapters", glance.get("n-check-chapters"), sum(bool(m) for m in margins.values()))
    compare("n-equalities", glance.get("n-equalities"), sum(abs(m) < 1e-9 for m in every))

    # The corrections and sharpenings, by kind, from the boxes of the chapters.
    made = [classify_correction(t) for name in chapters for t in _titles(book / f"{name}.ipynb")]
    statements = [m for m in made if m.kind == "statement"]
    for name, expected in (
        ("n-corr-statement", len(statements)),
        ("n-corr-substantive", sum(m.weight == "substantive" for m in statements)),
        ("n-corr-minor", sum(m.weight == "minor" for m in statements)),
        ("n-corr-castin", sum(m.whose == "Castin et al." for m in statements)),
        ("n-corr-kim", sum(m.whose == "Kim et al." for m in statements)),
        ("n-corr-code", sum(m.kind == "code" for m in made)),
        ("n-sharpenings", sum(m.kind == "sharpening" for m in made)),
    ):
        compare(name, glance.get(name), expected)

    # The published numbers by verdict: settings and hub models by their role, the rest by the verdict the
    # results page stored for each.
    verdict = {}
    for p in PUBLISHED_NUMBERS:
        if p.role == "setting":
            verdict[p.key] = "a setting"
        elif p.model in HUB_MODELS:
            verdict[p.key] = "not comparable offline"
        else:
            verdict[p.key] = glance.get(f"v-{p.key}", "no verdict")
    found += [f"{RESULTS} gives the published number {k!r} no verdict" for k, v in verdict.items()
              if v == "no verdict"]
    compare("n-published", glance.get("n-published"), len(PUBLISHED_NUMBERS))
    for name, word in (("n-reproduced", "reproduced"), ("n-differs", "differs"), ("n-trivial", "holds trivially"),
                       ("n-construction", "by construction"), ("n-settings", "a setting"),
                       ("n-offline", "not comparable offline")):
        compare(name, glance.get(name), sum(v == word for v in verdict.values()))

    # The values copied from a chapter, and those computed twice: each as the chapter stores it now (a key
    # that moved is read from the one chapter that states it, as the page does).
    def source(chapter: str, key: str) -> str | None:
        if key in states.get(chapter, {}):
            return states[chapter][key]
        holders = [name for name in chapters if key in states[name]]
        return states[holders[0]][key] if len(holders) == 1 else None

    for name, (chapter, key) in {**_copied(root), **SAME_AS}.items():
        expected = source(chapter, key)
        if expected is None:
            found.append(f"no chapter states {key!r} any more ({chapter}), which {RESULTS} shows as {name!r}")
        else:
            compare(name, glance.get(name), expected, count=False)

    # The landing page: every value it glues is stored by the page it names.
    pages = {RESULTS: glance, THEOREMS: _states(book / f"{THEOREMS}.ipynb")}
    for page, key in GLUED.findall((book / "intro.md").read_text()):
        if key not in pages.get(page, {}):
            found.append(f"intro.md glues {page}.ipynb::{key}, which {page} does not state")
    return found


def test_the_aggregates_agree_with_their_sources() -> None:
    found = disagreements(ROOT)
    assert not found, ("the pages at a glance disagree with the chapters (re-execute them after the chapters: "
                       "`make notebooks`, or fix the count):\n  " + "\n  ".join(found))


@pytest.fixture
def book_copy(tmp_path: Path) -> Path:
    """The book's stored notebooks, table of contents and landing page, copied to plant disagreements in."""
    (tmp_path / "book").mkdir()
    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    shutil.copy(ROOT / "book" / "intro.md", tmp_path / "book" / "intro.md")
    for path in (ROOT / "book").glob("*.ipynb"):
        shutil.copy(path, tmp_path / "book" / path.name)
    assert not disagreements(tmp_path)
    return tmp_path


def _plant_state(path: Path, name: str, text: str) -> None:
    nb = _notebook(path)
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            if output.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                output["data"]["application/papermill.record/text/plain"] = repr(text)
                path.write_text(json.dumps(nb))
                return
    raise AssertionError(f"{path.name} states no {name!r}")


def test_a_chapter_missing_from_the_count_is_caught(book_copy: Path) -> None:
    """The 632/686 case: the page counts the checks of every chapter but one."""
    long_context = len(_margins(book_copy / "book" / "long_context.ipynb"))
    shown = _count(_states(book_copy / "book" / f"{RESULTS}.ipynb")["n-checks"])
    _plant_state(book_copy / "book" / f"{RESULTS}.ipynb", "n-checks", f"{shown - long_context:,} checks")
    found = disagreements(book_copy)
    assert len(found) == 1 and found[0].startswith(f"{RESULTS} shows n-checks = '{shown - long_context:,} checks'")


def test_a_chapter_changed_after_the_page_is_caught(book_copy: Path) -> None:
    """A chapter re-executed after the pages at a glance: the copied value and the one computed twice."""
    chapter, key = _copied(book_copy)["tight-adv-alpha"]
    _plant_state(book_copy / "book" / f"{chapter}.ipynb", key, "0.01")
    _plant_state(book_copy / "book" / "audit.ipynb", "paper-adv-pub-alpha", "0.01")
    found = disagreements(book_copy)
    assert [f.split(" = ")[0] for f in found] == [f"{RESULTS} shows tight-adv-alpha", f"{RESULTS} shows adv-pub-alpha"]


def test_a_box_added_or_miscounted_is_caught(book_copy: Path) -> None:
    """A sharpening added to a chapter and not counted; a landing page that glues a value no page states."""
    path = book_copy / "book" / "mean_field.ipynb"
    nb = _notebook(path)
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": [
        "```{admonition} Sharpening: Theorem 3.5 holds with the exponent of a planted box\n```\n"]})
    path.write_text(json.dumps(nb))
    intro = book_copy / "book" / "intro.md"
    intro.write_text(intro.read_text() + "\n{glue:text}`results_at_a_glance.ipynb::n-planted:s`\n")
    found = disagreements(book_copy)
    assert any(f.startswith(f"{RESULTS} shows n-sharpenings") for f in found), found
    assert any("n-planted" in f for f in found) and len(found) == 2, found
