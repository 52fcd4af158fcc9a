"""The reading checks of tests/book/reading_checks.py on text alone (the browser test plants whole pages)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reading_checks import CODE, END, LINK, MATH, claim_problems, kind_of, layout_problems, prose_problems

from lipnb.report import read_ledger

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "book").glob("*.ipynb"))

CHAPTERS = set(range(1, 22))


def kinds(*texts: str, where: str = "prose") -> list[str | None]:
    return [kind_of(p) for p in prose_problems([(where, t) for t in texts], CHAPTERS)]


def test_what_is_not_a_defect() -> None:
    """Math, code spans, citations, URLs, intervals, indices, statistics, ASCII subscripts and words pass."""
    assert kinds(f"the bound {MATH} holds for {CODE} at layer 0 and seed 1 runs",
                 "the interval [0.299, 0.320] and F(3, 45) = 2.5, so 0 = 0 exactly; see https://a.org/x_y.py",
                 "Kim et al. [2021] and Castin et al. [2024]; Lip_X and m_n and n_max are math",
                 "Theorem 3.3 and Theorem 3.5, e.g. in Part 3, one holds trivially; Chapter 10 of Golub",
                 f"by {LINK}Lemma 3.1{END} along the segment, and {LINK}Theorem 3.5{END} and Theorem 3.3") == []


def test_one_problem_per_kind_and_block() -> None:
    """A long repr is one problem, not one per item; two blocks are two."""
    long = "[('dot', 1, 0), ('dot', 2, 0), ('dot', 4, 0)] = [('dot', 1, 0)] exactly"
    assert kinds(long, where="cell") == ["Python repr in the text"]
    assert kinds(long, long, where="cell") == ["Python repr in the text"] * 2


def test_each_defect_is_named() -> None:
    assert kinds("set prof.per_length", "the lof_p column", 'kind="head"', "call ledger()", "in gpt2_random/x.py:12") \
        == ["code identifier in the text"] * 5
    assert kinds("code version 9ee89d4", "git 23b0ba5+dirty") == ["commit hash in the text"] * 2
    assert kinds("0 values are NaN", "1 values are", "the value(s)", "e^x with x = 2006", "4.8 x faster") == [
        "zero written as 0", "one with a plural", "template plural", "exponent with a caret outside math",
        "spaced multiplication sign"]
    assert kinds("as chapter 22 shows", "as chapter 12 shows") == ["chapter cited by a file number",
                                                                   "chapter cited by number"]
    assert kinds(f"our LayerNorm version {LINK}our LayerNorm absorption{END}", "the the") == [
        "reference title repeated", "doubled word"]
    assert kinds(f"at the lengths of {LINK}The √n bound on real text{END}", f"in {LINK}It is tight{END}") == [
        "capitalised reference mid-sentence"] * 2
    assert kinds(f"{LINK}The √n bound{END} shows it. ({LINK}The flow{END}); and {LINK}the flow{END}") == []
    assert kinds("minilm", "random GPT-2 and gpt2-random:3", where="cell") == ["model id in the text"] * 2
    assert kinds("an error of 3e-07", "below 1.5e+05") == ["number in e-notation"] * 2
    assert kinds("MiniLM and SmolLM2 at 3 × 10⁻⁷", "the file gpt2-random.json") == []
    assert kinds("{'minilm': 3}", where="output") == ["Python repr in the text"]
    assert kinds("prof.per_length", where="output") == []  # printed code is code


def test_layout() -> None:
    note = "… its last recorded run took about 45 s on a CPU …"
    assert layout_problems({"height": 9600, "first_figure": 2400}, note, True) == []
    long, late, none = layout_problems({"height": 9601, "first_figure": 2401}, None, True)
    assert long.startswith("page too long: 12.0 screens") and late.startswith("first figure too late: it starts "
                                                                             "on screen 4")
    assert none.startswith("no Colab note")
    assert layout_problems({"height": 20000, "first_figure": None}, None, False, long_ok=True) == []


def test_a_claim_in_ascii_maths_or_code_is_found() -> None:
    """Each kind fires on its planted claim; the same claims in Unicode and words pass."""
    bad = ["Lip_X(f) ≤ Theorem C.3", "the exact constant is above the bound for n up to 2^20 + 1",
           "grows at the sqrt n rate", "the limit is ||V||₂ √n", "for γR² >= 10", "R*: the bound", "`f` is exact",
           "γ from the k x k reduction", "mha: the closed form equals the module", "the W_c ratio",
           "Lip / √(n - 1) ≥ 1/2", "A = -I: the constant", "the maximum is (1-ε)²ᵏ⁻¹", "the factor (2k-1)",
           "the ratio stays within 0.3-1", "exercise: -log(1 − p) / R²"]
    assert [len(claim_problems(c)) for c in bad] == [1] * len(bad)
    good = ["Lip(f) at X ≤ Theorem C.3", "above the bound for n up to 2²⁰ + 1", "grows at the √n rate",
            "the limit is ‖V‖₂ √n", "for γR² ≥ 10", "R⋆: the bound", "γₕ from the k × k reduction",
            "MiniLM layer 2, 32 windows of *Alice*, n = 128: every estimate converged", "exceeds x by 2",
            "random GPT-2's 2-norm constant within 1e-6", "4-bit weights from 512-to-8192 tokens, float32-only",
            "Lip / √(n − 1) ≥ 1/2 while the ratio is between 0.3 and 1", "A = −I: −log(1 − p)"]
    assert [claim_problems(c) for c in good] == [[]] * len(good)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_stored_claim_is_written_as_text(notebook: Path) -> None:
    """A claim is read as plain text (its ledger, the tightest-checks table): no ASCII maths, no code words."""
    found = [p for entry in read_ledger([notebook]) for p in claim_problems(entry.claim)]
    assert not found, "\n".join(found)
