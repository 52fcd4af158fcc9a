"""What a reader sees wrong in a page's reading text and layout: the checks of STYLE.md's machine-checkable rules
that ``tests/book/test_browser.py`` applies to the text and measures the browser returns for every page.

:func:`prose_problems` reads the text blocks of a page (prose, captions, table headers and cells, result titles,
and printed outputs apart), in which a formula is U+E000 and a code span U+E001, so neither is ever read:

- **W2 plumbing**: a Python container repr (``{'a': 1}``, ``(0.5, 0.7)``, ``[1, 2, 3]``, ``['a', 1]``, a
  ``True``/``False`` table cell; two numbers in square brackets, ``[0.299, 0.320]``, are an interval), a commit
  hash (7 to 40 hex digits with a letter and a digit, or "+dirty"), a code identifier outside a code span
  (``per_length``, ``prof.per_length``, ``kind="head"``, ``ledger()``, a file path; an ASCII subscript such as
  ``Lip_X`` or ``m_n`` is math); reprs and hashes are also looked for in printed outputs;
- **W4 doubled words**: "the the", a reference's word repeated around it ("The corrected Theorem 4.4,
  corrected"), a word of a cross-reference's text among the two words before it or the three after it ("our
  LayerNorm version [our LayerNorm absorption]", where the brackets are the reference);
- **W3 templates**: zero written as "0" before a word ("0 values", "0 pass"), one with a plural ("1 values",
  "1 hold"), "hold(s)", an exponent written with a caret outside math ("e^x with x = 2006"), a spaced
  multiplication sign ("4.8 x faster"); carets are looked for outside table cells (a check's claim may
  write ``f^m``), and "0 = 0" is a value, not a count;
- **W4 capitalised references**: a cross-reference whose text is a title starting with an article or a pronoun
  ("The", "A", "An", "It", "Its") after a lower-case word ("at the lengths of The √n bound on real text"): give the
  reference its own words;
- **S6 chapters by number**: "chapter 22", "chapters 22/23": a typed chapter number (the book numbers its
  chapters itself, and cross-references go by label), reported as a file number when the book has no such
  chapter.

:func:`layout_problems` reads the page's measures: **S2** a page longer than :data:`MAX_SCREENS` screens of
:data:`SCREEN_PX` at 1280 px, **S3** a first figure below the first :data:`FIGURE_WITHIN_SCREENS` screens, and
**S4** a chapter without its Colab note or a note without the chapter's run time.

Every problem starts with its kind (:data:`KINDS`), so that an allow-list can count them per page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import yaml

from lipnb.report import EMPHASIS

MATH, CODE, LINK, END = "\ue000", "\ue001", "\ue002", "\ue003"
SCREEN_PX, MAX_SCREENS, FIGURE_WITHIN_SCREENS = 800, 12, 3

KINDS = (
    "Python repr in the text", "commit hash in the text", "code identifier in the text", "doubled word",
    "reference title repeated", "zero written as 0", "one with a plural", "template plural",
    "exponent with a caret outside math", "spaced multiplication sign", "chapter cited by a file number",
    "chapter cited by number", "page too long", "first figure too late", "no Colab note",
    "display formula wider than its box", "result title buries its number", "model id in the text",
    "number in e-notation", "capitalised reference mid-sentence",
)

_NUM = r"[-−+]?\d+(?:\.\d+)?(?:e[-+−]?\d+)?"
_STR = r"['\"‘’“”][^'\"‘’“”]{0,40}['\"‘’“”]"
_WORD = r"(?:None|True|False)"
_ITEM = rf"(?:{_NUM}|{_STR}|{_WORD})"
_NAMED = rf"(?:{_STR}|{_WORD})"  # an item no interval holds
REPR = re.compile(
    rf"\{{\s*{_STR}\s*:"                                                     # a dict with string keys
    rf"|[(\[]\s*{_ITEM}\s*,\s*{_ITEM}\s*,\s*{_ITEM}(?:\s*,\s*{_ITEM})*\s*,?\s*[)\]]"  # three or more items
    rf"|[(\[]\s*(?:{_NAMED}\s*,\s*{_ITEM}|{_ITEM}\s*,\s*{_NAMED})\s*,?\s*[)\]]"  # two, a string or a constant
    rf"|(?<![\w)])\(\s*{_NUM}\s*,\s*{_NUM}\s*\)"                             # a tuple of two numbers, (0.5, 0.7)
    rf"|[(\[]\s*{_ITEM}\s*,\s*[)\]]"                                         # a tuple of one, (1,)
)
HASH = re.compile(r"(?<![\w.\-/#])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?:\+dirty)?(?![\w.\-])|\+dirty\b")
URL = re.compile(r"\b(?:https?://|www\.)\S+|\b[\w.-]+\.(?:org|com|io|net|edu|ai|rs|html)\b(?:/\S*)?")
IDENTIFIER = re.compile(
    r"(?<![\w.\-/])(?:[A-Za-z]\w*_\w*[A-Za-z0-9]"                           # snake_case: per_length, lof_p
    r"|[a-z_]\w+(?:\.[a-z_]\w+)+(?:\(\))?"                                  # dotted: prof.per_length, lipnb.core
    r"|[a-z_]\w*=(?=['\"‘’“”])"                                             # a keyword argument: kind="head"
    r"|[a-z_]\w*\(\))(?![\w])"                                              # a call: ledger()
)
# A subscript written in ASCII, math rather than code: "m_n", "x_i", "Lip_X", "Cov_1", "W_O" (not "lof_p", "sum_h").
ASCII_MATH = re.compile(r"(?:[A-Za-z]|[A-Z][a-z]{0,2})_[A-Za-z0-9]{1,3}")
DOUBLED = re.compile(r"\b([A-Za-z]+)\s+\1\b", re.I)
REFERENCE_KINDS = r"(?:Theorem|Lemma|Proposition|Corollary|Definition|Remark|Section|Sec\.|Figure|Fig\.|Table|Equation)"
TITLE_REPEATED = re.compile(rf"\b([A-Za-z]{{4,}})\s+{REFERENCE_KINDS}\s+[A-Z]?\.?\d+(?:\.\d+)*,?\s+\1\b", re.I)
STOPWORDS = set("""a an and as at be but by for from has have in into is it its of on or that the their then there
these this those to was were which with we our not no one two all each per than""".split())
# Words after which a number is an index, not a count ("layer 0 holds", "seed 1 runs").
INDEX_NOUNS = set("""layer layers head heads seed seeds step steps index position row column token block part
chapter theorem lemma proposition section figure table equation epoch iteration time window sequence run model
version exponent order degree entry level word item case n t k i j""".split())
AFTER_ZERO_OK = set("""and or to at in of on by for with is was as if when than from but the a an s ms px""".split())
PLURAL_AFTER_ONE = set("""values checks claims runs layers heads tokens inputs sequences chapters seeds lengths models
entries cases points rows columns figures tables problems corrections sharpenings results bounds tests steps windows
texts samples draws pairs errors pages numbers times hold pass fail agree differ exceed match lie remain reach grow are
were have show give need stay fall""".split())
ZERO = re.compile(r"(?<![\w.,−-])0\s+([a-z]{2,})\b")
ONE = re.compile(r"(?<![\w.,−-])1\s+([a-z]{2,})\b")
TEMPLATE_PLURAL = re.compile(r"\b[a-z]+\(s\)|\b[a-z]+\(es\)")
CARET = re.compile(r"[\w)]\^[\w({+\-−]")
TIMES = re.compile(r"\d\s+[x×]\s+(?!\d)[a-z]{2,}")
# A model's id where its name belongs ("minilm", "gpt2-random" in a table or a legend's text), and Python's e-notation
# ("3e-07") where a reader reads a power of ten.
MODEL_ID = re.compile(r"(?<![\w\-/.])(?:minilm(?:-decoder)?|gpt2-random(?::\d+)?|smollm2|llama-random(?:-norope)?)"
                      r"(?![\w\-]|\.\w)")
E_NOTATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+−]\d+(?![\w.])")
# A reference's text starting "The"/"A"/"It" straight after a lower-case word: a title pasted mid-sentence.
CAPITAL_REFERENCE = re.compile(rf"[a-z,]\s+{LINK}((?:The|A|An|It|Its)\b[^{END}]*){END}")
# "chapter 22", "chapters 22/23"; not "Chapter 10 of Golub and Van Loan", another book's chapter
CHAPTER_NUMBER = re.compile(r"\b[Cc]hapters?\s+(\d+(?:\s*(?:/|,|and|or|to|–|-)\s*\d+)*)(?!\d|\s+of\b)")


def book_chapter_numbers(root: Path) -> set[int]:
    """The numbers the book gives its chapters: ``_toc.yml``'s numbered parts, counted on across parts."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    count = sum(len(part["chapters"]) for part in toc.get("parts", []) if part.get("numbered"))
    return set(range(1, count + 1))


def _snippet(text: str, start: int, end: int) -> str:
    shown = text[max(0, start - 40): end + 40].replace(MATH, "$…$").replace(CODE, "`…`")
    shown = shown.replace(LINK, "[").replace(END, "]")
    return " ".join(shown.split())


def _word_before(text: str, at: int) -> str:
    words = re.findall(r"[A-Za-z]+", text[max(0, at - 30): at])
    return words[-1].lower() if words else ""


def _titles_repeated(text: str) -> Iterable[tuple[int, int, str]]:
    """Spans where a word of a cross-reference's text (marked by :data:`LINK` ... :data:`END`) is also one of the
    two words just before it or the three just after it, with no comma, colon, semicolon or full stop between: "our
    LayerNorm version [our LayerNorm absorption]", "[Lemma C.5, precise form] in its precise form". Only words of
    four letters or more that are neither stop words nor kinds of reference count as repeated."""
    def words(span: str) -> list[str]:
        return [w.lower() for w in re.findall(r"[A-Za-z][\w’'-]*", span)]

    def counts(word: str) -> bool:
        return len(word) >= 4 and word not in STOPWORDS and not re.fullmatch(REFERENCE_KINDS, word, re.I)

    plain = f"[{LINK}{END}]"
    for m in re.finditer(f"{LINK}([^{END}]*){END}", text):
        before = re.sub(plain, "", text[max(0, m.start() - 80): m.start()])
        after = re.sub(plain, "", text[m.end(): m.end() + 80])
        near = {*words(re.split(r"[,;:.]", before)[-1])[-2:], *words(re.split(r"[,;:.]", after)[0])[:3]}
        again = {w for w in words(m[1]) if counts(w)} & near
        if again:
            yield m.start(), m.end(), sorted(again)[0]


def prose_problems(texts: Iterable[tuple[str, str]], chapters: set[int]) -> list[str]:
    """The problems of a page's text blocks ``(where, text)`` (``where``: prose, caption, header, cell, title or
    output), given the numbers the book gives its chapters. See the module for what is found."""
    found: list[str] = []

    seen: set[tuple[int, str]] = set()

    def add(kind: str, where: str, text: str, start: int, end: int, advice: str) -> None:
        """One problem per kind and text block: its first instance (a long repr holds many)."""
        if (block, kind) not in seen:
            seen.add((block, kind))
            found.append(f"{kind} ({where}; {advice}): {_snippet(text, start, end)}")

    for block, (where, raw) in enumerate(texts):  # noqa: B007 (add() reads block)
        marked = URL.sub(" ", raw)
        text = marked.replace(LINK, "").replace(END, "")
        for m in REPR.finditer(text):
            add("Python repr in the text", where, text, m.start(), m.end(), "say it in words")
        if where in ("cell", "header") and text.strip() in ("True", "False"):
            add("Python repr in the text", where, text, 0, len(text), "a table says yes or no")
        for m in HASH.finditer(text):
            add("commit hash in the text", where, text, m.start(), m.end(), "no commit ids in the reading text")
        if where == "output":
            continue
        for m in IDENTIFIER.finditer(text):
            if ASCII_MATH.fullmatch(m.group()):
                continue
            add("code identifier in the text", where, text, m.start(), m.end(),
                "say it in words, or put code in a code span")
        for m in DOUBLED.finditer(text):
            add("doubled word", where, text, m.start(), m.end(), f"{m[1]!r} twice")
        for m in TITLE_REPEATED.finditer(text):
            add("reference title repeated", where, text, m.start(), m.end(), f"{m[1]!r} on both sides")
        for start, end, word in _titles_repeated(marked):
            add("reference title repeated", where, marked, start, end, f"{word!r} in the reference and beside it")
        for m in CAPITAL_REFERENCE.finditer(marked):
            add("capitalised reference mid-sentence", where, marked, m.start(), m.end(),
                "give the reference lower-case words of its own: {ref}`words <label>`")
        for m in ZERO.finditer(text):
            value = re.search(r"[=<>≤≥±×/+−-]\s*$", text[: m.start()])  # "0 = 0 exactly": a value, not a count
            if m[1] not in AFTER_ZERO_OK and _word_before(text, m.start()) not in INDEX_NOUNS and not value:
                add("zero written as 0", where, text, m.start(), m.end(), "write no, or counted(0, noun)")
        for m in ONE.finditer(text):
            if m[1] in PLURAL_AFTER_ONE and _word_before(text, m.start()) not in INDEX_NOUNS:
                add("one with a plural", where, text, m.start(), m.end(), "one takes the singular: counted(1, noun)")
        for m in TEMPLATE_PLURAL.finditer(text):
            add("template plural", where, text, m.start(), m.end(), "count it: counted(n, noun)")
        for m in CARET.finditer(text) if where != "cell" else ():  # a claim in a cell may write f^m for math
            add("exponent with a caret outside math", where, text, m.start(), m.end(), "write it as math")
        for m in TIMES.finditer(text):
            add("spaced multiplication sign", where, text, m.start(), m.end(), 'write "4.8 times" or "4.8x"')
        for m in MODEL_ID.finditer(text):
            add("model id in the text", where, text, m.start(), m.end(), "name the model in words (model_title)")
        for m in E_NOTATION.finditer(text):
            add("number in e-notation", where, text, m.start(), m.end(), "write a power of ten, as state() does")
        for m in CHAPTER_NUMBER.finditer(text):
            numbers = {int(n) for n in re.findall(r"\d+", m[1])}
            if numbers - chapters:
                add("chapter cited by a file number", where, text, m.start(), m.end(),
                    f"the book's chapters are {min(chapters)}-{max(chapters)}; cite by label with {{ref}}")
            else:
                add("chapter cited by number", where, text, m.start(), m.end(), "cite by label with {ref}")
    return found


def layout_problems(metrics: dict, note: str | None, chapter: bool, long_ok: bool = False) -> list[str]:
    """The problems of a page's measures (``height``, ``first_figure``: px from the top, None without a figure)
    and of its Colab note (``chapter``: the page has a notebook and so a Colab cell)."""
    found = []
    screens = metrics["height"] / SCREEN_PX
    if screens > MAX_SCREENS and not long_ok:
        found.append(f"page too long: {screens:.1f} screens of {SCREEN_PX} px at 1280 px, more than {MAX_SCREENS} "
                     "(split it by idea)")
    first = metrics.get("first_figure")
    if first is not None and first > FIGURE_WITHIN_SCREENS * SCREEN_PX:
        found.append(f"first figure too late: it starts on screen {first // SCREEN_PX + 1} ({first} px), after "
                     f"the first {FIGURE_WITHIN_SCREENS}")
    if chapter and not (note and re.search(r"run took .+ (?:s|min) on ", note)):
        found.append("no Colab note with the chapter's run time in place of its first cell: "
                     + (repr(note) if note else "none (run `python _ext/colab_cell.py`)"))
    return found


def kind_of(problem: str) -> str | None:
    """The kind of ``problem`` (one of :data:`KINDS`), or None for the page checks that have no allow-list."""
    return next((k for k in KINDS if problem.startswith(k)), None)


# A check's claim is read in its ledger and in the tightest-checks table as plain text, where no formula is set: its
# maths is written in Unicode (‖V‖₂, √n, 2²⁰, γₕ, k × k, ≤) and its names in words.
CLAIM_ASCII = {
    "underscore (a subscript or a code name)": re.compile(r"_"),
    "caret (an exponent)": re.compile(r"\^"),
    "sqrt written out": re.compile(r"\bsqrt\b"),
    "norm bars as ||": re.compile(r"\|\|"),
    "ASCII comparison or arrow": re.compile(r"<=|>=|!=|==|->"),
    "asterisk (Markdown emphasis or a star)": re.compile(r"\*"),
    "backtick": re.compile(r"`"),
    "x as a multiplication sign": re.compile(r"(?<![\w.])[\w.]{1,4} x [\w.]{1,4}(?![\w.])"),
    "a code word": re.compile(r"\b(?:mha|numpy|scipy|torch|rtol|atol|lipnb|autograd)\b"),
    # "n - 1", "A = -I", "(2k-1)", "(1-ε)", "0.3-1": a minus is "−", a range "between 0.3 and 1"; a hyphen in a word
    # ("2-norm", "4-bit", "GPT-2", "512-to-8192") or an exponent ("1e-6") stays
    "hyphen as a minus sign or a range": re.compile(
        r"(?:^|(?<=[\s(=:\[,]))-(?=[\d(√A-Za-zα-ωΑ-Ω.])|\s-\s|(?:(?<![A-Za-z\d])[A-Za-zα-ω]|(?<=\d)[A-DF-Za-df-zα-ω]|\))-(?=\d)"
        r"|(?<=\d)-(?=[\d(α-ω])"),
}




def claim_problems(claim: str) -> list[str]:
    """What in a check's claim is ASCII maths or code rather than text: one entry per kind found, with the match."""
    plain = EMPHASIS.sub("title", claim)  # "*Alice*", which the ledger sets in italics
    return [f"{kind}: {m.group()!r} in {claim!r}" for kind, pattern in CLAIM_ASCII.items()
            if (m := pattern.search(plain))]
