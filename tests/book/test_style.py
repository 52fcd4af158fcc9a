"""STYLE.md S5: every chapter ends with a summary and exercises, read from its MyST source.

A chapter (``book/<name>.md`` with a paired notebook) has, as its last two ``##`` sections, ``## Summary`` with
three to six bullets and ``## Exercises`` with two or three ``{exercise}`` (or gated ``{exercise-start}``) blocks,
each answered by a gated
solution (``{solution-start}`` ... ``{solution-end}``) folded with ``:class: dropdown``; its cells run and are
checked like every other cell, and the ledger cell comes last (``test_book.py`` checks that). The pages at a glance
are overviews, not chapters of one idea: they are exempt.

``SUMMARY_PENDING`` lists the chapters not yet rewritten to this rule; it only shrinks: delete a chapter's entry
when it gains its summary and exercises (the test fails on an entry whose chapter already complies).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists())
OVERVIEWS = {"results_at_a_glance", "theorems_at_a_glance"}
SUMMARY_PENDING: set[str] = set()
FENCE = r"^(?:`{3,}|:{3,})"


def _counted(n: int, noun: str) -> str:
    """``n`` of ``noun`` in words that agree: "no exercises", "one exercise", "4 exercises"."""
    return "no " + noun + "s" if n == 0 else f"one {noun}" if n == 1 else f"{n} {noun}s"


def summary_problems(text: str) -> list[str]:
    """What ``text`` (a chapter's MyST source) lacks of S5; empty when it ends with its summary and exercises."""
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    titles = [s.splitlines()[0].strip() for s in sections]
    if titles[-2:] != ["Summary", "Exercises"]:
        return [f"the last two ## sections are {titles[-2:]}, not ['Summary', 'Exercises']"]
    problems = []
    summary, exercises = sections[-2], sections[-1]
    bullets = len(re.findall(r"^[-*] \S", summary, re.M))
    if not 3 <= bullets <= 6:
        problems.append(f"## Summary has {_counted(bullets, 'bullet')}, not three to six")
    count = len(re.findall(FENCE + r"\{exercise(?:-start)?\}", exercises, re.M))
    if not 2 <= count <= 3:
        problems.append(f"## Exercises has {_counted(count, 'exercise')}, not two or three")
    solutions = re.findall(FENCE + r"\{solution-start\}[^\n]*\n((?::\w[^\n]*\n)*)", exercises, re.M)
    if len(solutions) != count:
        problems.append(f"{_counted(count, 'exercise')} but {_counted(len(solutions), 'gated solution')} "
                        "({solution-start})")
    folded = sum(":class: dropdown" in options for options in solutions)
    if folded != len(solutions):
        problems.append(f"{_counted(len(solutions) - folded, 'solution')} not folded (:class: dropdown)")
    return problems


GOOD = """# A chapter

## What it shows

Text.

## Summary

- one
- two
- three

## Exercises

```{exercise}
:label: ex-one

Derive the masked constant with $n+1$.
```

```{solution-start} ex-one
:class: dropdown
```

The answer.

```{solution-end}
```

:::{exercise-start}
:label: ex-two
:::
Find an input that breaks a printed bound.
:::{exercise-end}
:::

:::{solution-start} ex-two
:class: dropdown
:::

Another answer.

:::{solution-end}
:::
"""


def test_the_summary_check_finds_what_is_missing() -> None:
    assert summary_problems(GOOD) == []
    assert summary_problems(GOOD.replace("## Summary", "## Recap")) == [
        "the last two ## sections are ['Recap', 'Exercises'], not ['Summary', 'Exercises']"]
    assert summary_problems(GOOD.replace("- three\n", "")) == ["## Summary has 2 bullets, not three to six"]
    unfolded = GOOD.replace(":::{solution-start} ex-two\n:class: dropdown\n", ":::{solution-start} ex-two\n")
    assert summary_problems(unfolded) == ["one solution not folded (:class: dropdown)"]
    one = GOOD[: GOOD.index(":::{exercise-start}")]
    assert summary_problems(one) == ["## Exercises has one exercise, not two or three"]


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c.stem not in OVERVIEWS], ids=lambda c: c.stem)
def test_every_chapter_ends_with_a_summary_and_exercises(chapter: Path) -> None:
    """S5, for every chapter not in SUMMARY_PENDING; a pending chapter that complies must leave the list."""
    problems = summary_problems(chapter.read_text())
    if chapter.stem in SUMMARY_PENDING:
        assert problems, f"book/{chapter.name} has its summary and exercises: delete it from SUMMARY_PENDING"
        pytest.xfail(f"book/{chapter.name} is pending: " + "; ".join(problems))
    assert not problems, f"book/{chapter.name} (STYLE.md S5): " + "; ".join(problems)


def test_pending_chapters_exist() -> None:
    gone = SUMMARY_PENDING - {c.stem for c in CHAPTERS}
    assert not gone, f"SUMMARY_PENDING names chapters that no longer exist: {sorted(gone)}"
