"""Every number a chapter states as a result comes from a cell of the build, never typed into its prose.

The test reads every chapter ``book/*.md`` (a page with a paired notebook) and fails on any *decimal number*
(``0.511``, ``1,5`` is not one), *percentage* (``20%``, ``40 percent``), *power of ten written with
superscripts* (``10⁻⁶``) or *approximate value* (``≈ 120``, ``about 4.5``) left in the prose once the
following are removed:

- the front matter, code cells (```` ```{code-cell} ````) and ```` ```{math} ```` blocks;
- the option lines of directives (``:label: ...``, ``:class: ...``) and label targets ``(name)=``;
- math, ``$...$`` and ``$$...$$``: a number inside math is a formula or a parameter, not a result
  typed into prose (put results in a glue role, ``{glue:text}`key:.2f```);
- inline code and every role with its argument (``{glue:text}`x```, ``{cite:p}`key```,
  ``{prf:ref}`Theorem 3.3 <thm-3-3>```, ``{numref}`fig-x```), link targets ``](...)`` and HTML comments.

What remains is prose. The allow-list for numbers that are not results is short and explicit:

1. numbered references: ``Theorem 3.3``, ``Lemma C.7``, ``Section 5.2``, ``Sec. 5.2``, ``Appendix E.3``,
   ``App. E.1``, ``Eq. 1``, ``Figure 2``, ``Table 1`` ... (see ``REFERENCE``), also in lists such as
   ``Theorems 3.3 and 3.5``;
2. the usual confidence levels ``90%``, ``95%``, ``99%`` (a setting of an interval, not a measurement);
3. ``PARAMETERS``: per chapter, the exact strings of fixed settings that a cell sets and the prose
   names, each with the reason. Keep it short: prefer math (``$R = 30$``) for a parameter.

Everything else is a finding: glue the number from the cell that computes it, or print it next to the
sentence. The failure message lists every offending chapter, line and number.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

BOOK = pathlib.Path(__file__).resolve().parents[2] / "book"

REFERENCE = re.compile(
    r"\b(?:Theorem|Lemma|Proposition|Corollary|Definition|Remark|Assumption|Example|Algorithm|Section|Sec\."
    r"|Appendix|App\.|Figure|Fig\.|Table|Equation|Eq\.|Eqs\.|Chapter|chapter|Part|Step)s?"
    r"(?:\s|~|\xa0)*[A-Z]?\d+(?:\.\d+)*"
    r"(?:\s*(?:,|and|or|to|--|–)\s*[A-Z]?\d+(?:\.\d+)*)*"
)
CONFIDENCE = re.compile(r"\b(?:90|95|99)\s?%(?=\s*(?:confidence|intervals?|Student|bootstrap|t-intervals?|CI)\b)")
PARAMETERS: dict[str, tuple[str, ...]] = {
    # chapter file name -> exact strings of settings fixed by a cell (reason in a comment)
    "performance.md": ("layer 6",         # the benchmark's GPT-2 layer, a setting of the workload
                       "16 and of 32 tokens", "with 32 tokens", "at 32 tokens"),  # the live run's lengths, set
                                                                                  # in its visible cell
    "real_text.md": ("128-token",),       # the training length of the paper's script, a setting
    "language_models.md": ("4-gram",),      # an n-gram baseline named by its order, a setting
}
NUMBER = re.compile(
    r"\d+\.\d+"                                   # decimal number
    r"|\d+\s?(?:%|percent\b|per cent\b)"          # percentage
    r"|\b10[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+"                       # power of ten in superscripts
    r"|(?:≈|~|\babout|\baround|\bnearly|\broughly)\s*\d+(?:[.,]\d+)?\b(?!\s*(?:heads?|layers?|tokens?)\b)"
    r"|(?:≈|\babout|\baround|\bnearly|\broughly|\bclose to|\bnear)\s*(?:MATH\[[^\]]*\]|NUMERIC_FORMULA)"
    r"|MATH\[[^\]]*\]"
)


# A formula that is only a number: "$1/4$", "$10^{-7}$", "$1.5 \\cdot 10^{11}$" (not "$\\sqrt{n-1}$", "$n^{1/4}$").
NUMERIC_MATH = re.compile(r"[\s\d.,+\-/^{}()]*\d[\s\d.,+\-/^{}()]*(?:(?:\\cdot|\\times)[\s\d.,+\-/^{}()]+)*")
TYPED_IN_MATH = re.compile(r"^\s*[-+]?\d+\.\d+\s*$|\\approx\s*[-+]?\d|\\sim\s*\d")


def math_span(match: re.Match[str]) -> str:
    """Math disappears, except a lone decimal (``$0.511$``) or an approximation (``$\\approx 120$``); a formul
    that is only a number leaves a marker, so that "about $1/4$" (an approximate value typed as math) is found."""
    body = match.group(0).strip("$")
    if TYPED_IN_MATH.search(body):
        return f" MATH[{body}] "
    return " NUMERIC_FORMULA " if NUMERIC_MATH.fullmatch(body) else " "


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The prose of a MyST chapter, line by line, with math, code, roles and directive options removed."""
    lines = text.splitlines()
    out, fence, skip, in_math, in_front = [], None, False, False, bool(lines) and lines[0] == "---"
    for number, line in enumerate(lines, 1):
        if in_front:
            in_front = not (number > 1 and line == "---")
            continue
        stripped = line.strip()
        opening = re.match(r"^(`{3,}|~{3,})\s*(\{[^}]*\})?", stripped)
        if fence is None and opening:
            fence = opening.group(1)
            skip = (opening.group(2) or "") in ("{code-cell}", "{math}", "") or opening.group(2) is None
            continue
        if fence is not None and stripped == fence:
            fence, skip = None, False
            continue
        if skip or (stripped.startswith(":") and fence is not None):
            continue
        if stripped.startswith("$$"):
            in_math = not (in_math or (stripped.endswith("$$") and len(stripped) > 2))
            continue
        if in_math or re.match(r"^\([\w.:-]+\)=$", stripped):
            continue
        line = re.sub(r"<!--.*?-->", "", line)
        line = re.sub(r"\$[^$]*\$", math_span, line)
        line = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", line)
        line = re.sub(r"`[^`]*`", " ", line)
        line = re.sub(r"\]\([^)]*\)", "]", line)
        out.append((number, line))
    return out


def prose_numbers(path: pathlib.Path) -> list[str]:
    """Every number that the prose of a chapter states outside the allow-list, as ``file:line: number``."""
    allowed = PARAMETERS.get(path.name, ())
    hits = []
    for number, line in prose_lines(path.read_text()):
        line = CONFIDENCE.sub(" ", REFERENCE.sub(" ", line))
        for parameter in allowed:
            line = line.replace(parameter, " ")
        hits += [f"{path.name}:{number}: {' '.join(m.group(0).split())!r}" for m in NUMBER.finditer(line)]
    return hits


def test_scanner_catches_typed_numbers(tmp_path: pathlib.Path) -> None:
    """The rules themselves: typed results are found, math, code, glue and references are not."""
    chapter = tmp_path / "99_x.md"
    chapter.write_text(
        "---\nfront: 1.5\n---\n# Title\n\nThe bound is 1.992 and off by 40%, better than 10⁻⁶, ≈ 120.\n"
        "By Theorem 3.3 and Lemma C.7 (Sec. 5.2), the 95% interval is {glue:text}`x:.2f`; $R = 2.5$.\n"
        "It grows like about $1/4$, like $\\sqrt n$, roughly $n^{1/2}$, near $10^{-7}$.\n"
        "```{code-cell} ipython3\nx = 0.25\n```\n"
        "```{prf:theorem} Title\n:label: thm-9.9\n\nInside a theorem: 3.14.\n```\n$$\n0.5\n$$\n"
    )
    found = [h.split(": ", 1)[1] for h in prose_numbers(chapter)]
    assert found == ["'1.992'", "'40%'", "'10⁻⁶'", "'≈ 120'", "'about NUMERIC_FORMULA'",
                     "'near NUMERIC_FORMULA'", "'3.14'"]


PENDING: dict[str, str] = {
    # chapter file name -> why its typed numbers are still there (the test is an expected failure there)
}


CHAPTERS = [*sorted(p.name for p in BOOK.glob("*.md") if p.with_suffix(".ipynb").exists()), "intro.md"]


def glued_integers(path: pathlib.Path) -> set[str]:
    """The integers a chapter glues (its stored outputs), as text: the counts its prose must cite, not type."""
    notebook = path.with_suffix(".ipynb")
    if not notebook.exists():
        return set()
    found = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            text = "".join(text) if isinstance(text, list) else text
            if text is not None and re.fullmatch(r"-?\d+", text.strip("'\"")):
                found.add(text.strip("'\""))
    return found


def typed_glued_integers(path: pathlib.Path) -> list[str]:
    """Integers above 2 typed into the prose that the chapter also glues ("5 tight clusters" with 5 computed)."""
    glued, allowed = glued_integers(path), PARAMETERS.get(path.name, ())
    hits = []
    for number, line in prose_lines(path.read_text()):
        line = CONFIDENCE.sub(" ", REFERENCE.sub(" ", line))
        for parameter in allowed:
            line = line.replace(parameter, " ")
        hits += [f"{path.name}:{number}: {m.group(0)!r}" for m in re.finditer(r"(?<![\w.\-])\d+(?![\w.])", line)
                 if m.group(0) in glued and int(m.group(0)) > 2]
    return hits


def test_scanner_catches_typed_glued_integers(tmp_path: pathlib.Path) -> None:
    chapter = tmp_path / "99_x.md"
    chapter.write_text("# T\n\nThe tokens gather into 5 clusters; Theorem 5 says so, with {glue:text}`k` of them.\n")
    record = {"output_type": "display_data", "metadata": {},
              "data": {"application/papermill.record/text/plain": "5"}}
    chapter.with_suffix(".ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [record]}]}))
    assert typed_glued_integers(chapter) == ["99_x.md:3: '5'"]


@pytest.mark.parametrize("chapter", [
    pytest.param(name, marks=pytest.mark.xfail(reason=PENDING[name], strict=False) if name in PENDING else ())
    for name in CHAPTERS
])
def test_no_typed_numbers_in_prose(chapter: str) -> None:
    """No chapter states a decimal number, a percentage or an approximate value in its prose."""
    hits = prose_numbers(BOOK / chapter) + typed_glued_integers(BOOK / chapter)
    assert not hits, "numbers typed into chapter prose (glue them):\n" + "\n".join(hits)


# A glued number followed by a spaced percent sign or the word: "{glue:text}`x` %" or "… percent", which read
# "11.5 %" beside the tables' "2.2%".
SPACED_PERCENT = re.compile(r"\{glue:text\}`[^`]*`(?:[ \t\u00a0\u202f]+%|\s+percent\b)")


def test_a_percent_sign_follows_its_number() -> None:
    """Every chapter writes a glued percentage as the tables do, "11.5%", with no space before the sign."""
    assert SPACED_PERCENT.search("has an {glue:text}`p` % chance") and not SPACED_PERCENT.search("{glue:text}`p`%")
    assert SPACED_PERCENT.search("{glue:text}`p` percent of the rows")
    assert SPACED_PERCENT.search("{glue:text}`p`\u00a0% at the embeddings")
    hits = [f"{path.name}:{text[:m.start()].count(chr(10)) + 1}"
            for path in sorted(BOOK.glob("*.md")) for text in [path.read_text()] for m in SPACED_PERCENT.finditer(text)]
    assert not hits, "a space before a percent sign:\n" + "\n".join(hits)


# A chapter's title used as words of a sentence: "at the lengths of {ref}`ch-x`" prints "at the lengths of The √n
# bound on real text", and a title with its own comma or question mark garbles even a parenthesis ("(SmolLM2's rotary
# heads, and its 4-bit weights computed them)"). A chapter reference in the prose gives its own words,
# {ref}`the real-text √n chapter <ch-x>`; code that builds a table may still link a chapter by its title.
BARE_CHAPTER = re.compile(r"\{ref\}`ch-[\w-]+`")
CODE_CELL = re.compile(r"```\{code-cell\}.*?\n```", re.S)


def bare_chapter_references(text: str) -> list[int]:
    """The lines of ``text`` with a bare chapter reference outside code cells."""
    prose = CODE_CELL.sub(lambda m: "\n" * m.group().count("\n"), text)
    return [prose[: m.start()].count("\n") + 1 for m in BARE_CHAPTER.finditer(prose)]


def test_a_chapter_is_named_in_words_in_the_prose() -> None:
    """Every page cites a chapter in its prose with words of its own, never with the chapter's bare title."""
    assert bare_chapter_references("as measured in {ref}`ch-x`.\n\nand (see {ref}`ch-y`)") == [1, 3]
    assert bare_chapter_references("in {ref}`the x chapter <ch-x>`\n```{code-cell}\nf'{{ref}}`ch-x`'\n```") == []
    hits = [f"{path.name}:{line}" for path in sorted(BOOK.glob("*.md"))
            for line in bare_chapter_references(path.read_text())]
    assert not hits, "a chapter's bare title in the prose (give the reference its own words):\n" + "\n".join(hits)
