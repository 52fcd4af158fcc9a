"""A ratchet against measuring loops in the chapters' cells (STYLE.md C3: loops live in ``lipnb``).

A sweep or a measuring loop belongs in ``lipnb.experiments``, with a unit test and a results cache; a chapter
calls it. This test counts, in each chapter's code cells (the Colab install cell excepted):

- every ``for`` and ``while`` statement (a loop that draws panels counts too: it is code a reader must read);
- every comprehension or generator expression that computes: one whose expressions call a function other
  than a formatting or container builtin (``str``, ``float``, ``round``, ``len``, ``zip``, ...) or a string
  method (``.format``, ``.join``, ...). ``[f"{x:.2f}" for x in row]`` is formatting and is not counted;
  ``[local_lipschitz(f, X) for X in inputs]`` is a sweep and is.

A chapter may hold at most ``LOOP_ALLOWANCE[name]`` of them (0 where it is not listed): today's counts, as
the start. The allowance only shrinks:

- a chapter with more loops than its allowance fails: move the loop into a function of ``lipnb.experiments``
  (with a unit test) and call that;
- a chapter with fewer fails ``test_every_allowance_is_lowered_when_loops_go``, with the number to write:
  **lower its entry to the count the failure prints** (and delete the entry when it reaches 0), so that the loops
  removed cannot come back;
- a chapter split in two divides its entry between the new chapters (their sum no larger than the old entry);
  the sum of all entries may never exceed ``LOOP_TOTAL_AT_START``, and an entry for a chapter that no longer
  exists fails until it is removed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))
from colab_cell import MARKER as COLAB_MARKER  # noqa: E402

CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists())

# chapter file name (book/<name>.md) -> the most loops its cells may hold. Only lower an entry (see above).
LOOP_ALLOWANCE: dict[str, int] = {
    "adversarial": 7,
    "audit": 3,
    "biases": 6,
    "certificate": 4,
    "deep_language_models": 9,
    "flow": 15,
    "invertible": 1,
    "l2_derivation": 2,
    "l2_tightness": 4,
    "language_models": 5,
    "large_radius": 11,
    "long_context": 18,
    "masked": 14,
    "masked_mean_field": 8,
    "mean_field": 2,
    "mean_field_bound": 2,
    "multihead": 2,
    "normalization": 2,
    "performance": 14,
    "published_real_data": 9,
    "quadratic_growth": 2,
    "random_start": 14,
    "real_text": 7,
    "results_at_a_glance": 29,
    "rotary_heads": 4,
    "self_attention": 8,
    "smollm2": 11,
    "smollm2_layers": 16,
    "sqrt_n_bound": 7,
    "sqrt_n_real_text": 9,
    "sqrt_n_window": 4,
    "theorems_at_a_glance": 6,
    "tightness": 11,
    "two_diracs": 4,
}
LOOP_TOTAL_AT_START = 331

# Calls that format or hold values rather than compute them: a comprehension that calls only these is no sweep.
FORMATTING = {
    "abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr",
    "hasattr", "int", "isinstance", "iter", "len", "list", "map", "max", "min", "next", "range", "repr", "reversed",
    "round", "set", "sorted", "str", "sum", "tuple", "type", "vars", "zip",
    # methods of str, list and dict, and the values of tensors, arrays and frames read as numbers
    "append", "capitalize", "count", "endswith", "get", "index", "item", "items", "join", "keys", "lower", "lstrip",
    "replace", "rstrip", "split", "startswith", "strip", "title", "tolist", "upper", "values",
    # lipnb's names in words for a table or a legend
    "dataset_title", "kind_title", "model_title", "workload_name",
}


def _calls_something(node: ast.AST) -> bool:
    """Whether the element or conditions of comprehension ``node`` call anything but :data:`FORMATTING`."""
    parts: list[ast.AST] = [node.elt] if hasattr(node, "elt") else [node.key, node.value]
    parts += [cond for gen in node.generators for cond in gen.ifs]
    for part in parts:
        for call in (n for n in ast.walk(part) if isinstance(n, ast.Call)):
            name = getattr(call.func, "attr", getattr(call.func, "id", None))
            if name not in FORMATTING:
                return True
    return False


def loops_in(source: str) -> list[tuple[int, str]]:
    """The loops of one cell's ``source``: (line, what) for each ``for``/``while`` and computing comprehension.
    IPython magics and shell lines (``%matplotlib``, ``!pip``) are dropped before parsing."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            found.append((node.lineno, "for loop"))
        elif isinstance(node, ast.While):
            found.append((node.lineno, "while loop"))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and _calls_something(node):
            found.append((node.lineno, "comprehension that computes"))
    return sorted(found)


def chapter_loops(chapter: Path) -> list[str]:
    """Every loop of ``chapter``'s code cells, as ``code cell k, line l: what`` (cells counted from 1)."""
    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    return [f"code cell {k}, line {line}: {what}" for k, cell in enumerate(code, 1)
            if not cell.source.startswith(COLAB_MARKER) for line, what in loops_in(cell.source)]


def test_the_loop_count_finds_loops_and_passes_over_formatting() -> None:
    source = ("for ax in axes:\n    ax.plot(x)\n"
              "while k < 3:\n    k += 1\n"
              "rows = [local_lipschitz(f, X) for X in inputs]\n"
              "labels = [f'{v:.2f}' for v in values]\n"
              "text = ', '.join(str(round(v, 2)) for v in values)\n"
              "table = {k: float(v.item()) for k, v in zip(keys, vals)}\n"
              "kept = [x for x in xs if bound(x) > 1]\n"
              "%matplotlib inline\n")
    assert loops_in(source) == [(1, "for loop"), (3, "while loop"), (5, "comprehension that computes"),
                                (9, "comprehension that computes")]


def test_the_ratchet_fails_on_one_loop_more_and_on_one_less(tmp_path: Path) -> None:
    """A planted chapter with one loop and an allowance of 0 fails; with an allowance of 2 it asks for 1."""
    header = CHAPTERS[0].read_text().split("\n---\n")[0] + "\n---\n\n# A chapter\n\n"
    chapter = tmp_path / "demo.md"
    chapter.write_text(header + "```{code-cell} ipython3\n" + COLAB_MARKER + "\nfor i in range(3):\n    pass\n```\n\n"
                       "```{code-cell} ipython3\nresults = [measure(n) for n in lengths]\n```\n")
    assert chapter_loops(chapter) == ["code cell 2, line 1: comprehension that computes"]
    assert "has 1 loop in its cells, more than its allowance of 0" in _verdict(chapter, 0)
    assert "lower LOOP_ALLOWANCE['demo'] to 1" in _verdict(chapter, 2)
    assert _verdict(chapter, 1) == ""


def _verdict(chapter: Path, allowance: int) -> str:
    """What the ratchet says of ``chapter`` under ``allowance``: empty when the count equals it."""
    loops, name = chapter_loops(chapter), chapter.stem
    if len(loops) > allowance:
        return (f"book/{name}.md has {len(loops)} loop{'s' * (len(loops) != 1)} in its cells, more than its allowance "
                f"of {allowance}: move the sweep into lipnb.experiments (with a unit test) and call it (STYLE.md C3)."
                "\n  " + "\n  ".join(loops))
    if len(loops) < allowance:
        return (f"book/{name}.md has {len(loops)} loop{'s' * (len(loops) != 1)} in its cells, fewer than its "
                f"allowance of {allowance}: lower LOOP_ALLOWANCE['{name}'] to {len(loops)} in tests/book/test_loops.py"
                + (" (delete the entry)" if not loops else "") + " so that they cannot come back.")
    return ""


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_no_chapter_gains_a_measuring_loop(chapter: Path) -> None:
    """A chapter with more loops than its allowance fails, listing where they are."""
    loops = chapter_loops(chapter)
    if len(loops) > LOOP_ALLOWANCE.get(chapter.stem, 0):
        pytest.fail(_verdict(chapter, LOOP_ALLOWANCE.get(chapter.stem, 0)))


def test_every_allowance_is_lowered_when_loops_go() -> None:
    """The ratchet's other half: an allowance above its chapter's count is lowered to it (the failure says to
    what), so that a loop moved into ``lipnb`` cannot come back."""
    loose = [v for c in CHAPTERS if len(chapter_loops(c)) < LOOP_ALLOWANCE.get(c.stem, 0)
             for v in (_verdict(c, LOOP_ALLOWANCE[c.stem]),)]
    assert not loose, "\n".join(loose)


def test_the_allowance_only_shrinks() -> None:
    """No entry for a chapter that is gone, no entry of 0, and the entries never sum above the start."""
    names = {c.stem for c in CHAPTERS}
    stale = sorted(set(LOOP_ALLOWANCE) - names)
    assert not stale, f"LOOP_ALLOWANCE lists chapters that no longer exist: {stale} (remove them, or move their " \
                      "entries to the chapters they became)"
    assert all(v > 0 for v in LOOP_ALLOWANCE.values()), "delete entries of 0"
    total = sum(LOOP_ALLOWANCE.values())
    assert total <= LOOP_TOTAL_AT_START, f"LOOP_ALLOWANCE sums to {total}, above its start {LOOP_TOTAL_AT_START}"
