"""The nbval plugin that compares numbers as numbers: what it lets through and what it must still catch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nbval_numeric import harmonize_outputs, harmonize_text, tolerances, unit_in_last_place


@pytest.mark.parametrize(("token", "unit"), [("0.1303", 1e-4), ("238.39196775204005", 1e-14), ("2.5e-07", 1e-8),
                                             ("12", 0.0), ("3.", 1.0), ("1E+03", 1000.0)])
def test_unit_in_last_place(token: str, unit: float) -> None:
    assert unit_in_last_place(token) == pytest.approx(unit, rel=1e-12)


def test_kernel_rounding_in_the_last_bits_is_accepted() -> None:
    stored = "reached 238.39196775204005 of 241.5"
    assert harmonize_text(stored, "reached 238.3919677520401 of 241.5") == stored


def test_a_rounding_flip_of_one_printed_digit_is_accepted_and_two_are_not() -> None:
    assert harmonize_text("rate 0.1303", "rate 0.1302") == "rate 0.1303"
    assert harmonize_text("rate 0.1303", "rate 0.1301") == "rate 0.1301"


def test_a_real_change_is_caught_and_only_it_is_left_different() -> None:
    stored = "[12.16, 67.37, 17.62]"
    assert harmonize_text(stored, "[12.16, 15.91, 17.62]") == "[12.16, 15.91, 17.62]"
    assert harmonize_text(stored, "[12.160000000001, 67.37, 17.62]") == stored


def test_counts_must_match_exactly() -> None:
    assert harmonize_text("5 tight clusters", "6 tight clusters") == "6 tight clusters"


def test_text_around_the_numbers_must_match() -> None:
    assert harmonize_text("holds: x | 1.0", "FAILS: x | 1.0000000000001") == "FAILS: x | 1.0000000000001"
    assert harmonize_text("a 1.0 b", "a 1.0 b 2") == "a 1.0 b 2"


def test_numbers_inside_words_are_text() -> None:
    assert harmonize_text("log2(73) = 6.19", "log3(73) = 6.19") == "log3(73) = 6.19"
    assert harmonize_text("x1 = 2.5", "x2 = 2.5") == "x2 = 2.5"
    assert harmonize_text("range 0.6-1", "range 0.6-1.0000000000001") == "range 0.6-1"


def test_non_finite_values_are_text() -> None:
    assert harmonize_text("nan 1.0", "nan 1.0") == "nan 1.0"
    assert harmonize_text("x 1e400", "x 1e401") == "x 1e401"


def test_a_cell_tag_loosens_the_tolerance() -> None:
    rtol, atol = tolerances(["nbval-check-output", "nbval-rtol=1e-2"])
    assert (rtol, atol) == (1e-2, 0.0)
    assert harmonize_text("0.1303", "0.1301", rtol, atol) == "0.1303"
    assert tolerances(["nbval-atol=0.5"]) == (1e-9, 0.5)


@pytest.mark.parametrize("tag", ["nbval-rtol=abc", "nbval-atol=-1", "nbval-rtol=inf"])
def test_a_bad_tolerance_tag_is_an_error(tag: str) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        tolerances([tag])


def test_outputs_are_paired_by_stream_and_mimetype_and_not_changed_in_place() -> None:
    stored = [{"output_type": "stream", "name": "stdout", "text": "x = 0.5\n"},
              {"output_type": "display_data", "data": {"text/plain": "'1.25'", "image/png": "AAAA"}}]
    new = [{"output_type": "display_data", "data": {"text/plain": "'1.2500000000001'", "image/png": "BBBB"}},
           {"output_type": "stream", "name": "stdout", "text": "x = 0.50000000000001\n"}]
    out = harmonize_outputs(new, stored)
    assert out[0]["data"] == {"text/plain": "'1.25'", "image/png": "BBBB"}
    assert out[1]["text"] == "x = 0.5\n"
    assert new[1]["text"] == "x = 0.50000000000001\n"


def _notebook(path: Path, source: str, stored: str, tags: list[str]) -> None:
    cell = {"cell_type": "code", "execution_count": 1, "id": "c1", "metadata": {"tags": tags}, "source": source,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": stored}]}
    nb = {"cells": [cell], "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


def test_nbval_runs_through_the_plugin(tmp_path: Path) -> None:
    """End to end: a tolerated difference passes under nbval, a real one fails, in one kernel run each."""
    code = "print(0.1 + 0.2, 10 / 3)"
    _notebook(tmp_path / "good.ipynb", code, "0.3 3.333333333333333\n", ["nbval-check-output"])
    _notebook(tmp_path / "bad.ipynb", code, "0.5 3.333333333333333\n", ["nbval-check-output"])
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "--nbval-lax", "--nbval-current-env",
           "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    good = subprocess.run([*run, str(tmp_path / "good.ipynb")], capture_output=True, text=True, cwd=tmp_path)
    bad = subprocess.run([*run, str(tmp_path / "bad.ipynb")], capture_output=True, text=True, cwd=tmp_path)
    assert good.returncode == 0, good.stdout[-2000:]
    assert bad.returncode == 1, bad.stdout[-2000:]
    assert "0.5" in bad.stdout


def test_a_power_of_ten_is_one_number() -> None:
    """lipnb.report writes "3.4 × 10⁻⁷" (no-break spaces): compared as 3.4e-7, within one unit in its last digit,
    against a stored "0.0" or another power of ten; a change beyond it still fails."""
    power = "3.4\u00a0×\u00a010⁻⁷"
    assert harmonize_text("'0.0'", f"'{power}'") == "'0.0'"
    stored_repr = repr(power)  # a glued value's text/plain: its repr, the no-break spaces escaped
    assert "\\xa0" in stored_repr and harmonize_text(stored_repr, "'0.0'") == stored_repr
    assert harmonize_text(power, "3.5\u00a0×\u00a010⁻⁷") == power
    assert harmonize_text(power, "3.9\u00a0×\u00a010⁻⁷") == "3.9\u00a0×\u00a010⁻⁷"
    assert harmonize_text("below 10⁻¹⁴", "below 3\u00a0×\u00a010⁻¹²") == "below 3\u00a0×\u00a010⁻¹²"
    assert unit_in_last_place(power) == pytest.approx(1e-8) and unit_in_last_place("10⁻¹⁴") == pytest.approx(1e-14)


def test_a_minus_sign_is_part_of_its_number() -> None:
    """lipnb.report writes "−0.01" (U+2212): one number, compared with its sign, even across a sign flip at zero."""
    assert harmonize_text("[−0.06, 0.02]", "[−0.0600000000001, 0.02]") == "[−0.06, 0.02]"
    assert harmonize_text("−0.00", "0.00") == "−0.00"
    assert harmonize_text("−0.5", "0.5") == "0.5"
    assert unit_in_last_place("−0.01") == pytest.approx(0.01)


def test_a_number_with_thousands_separators_is_one_number() -> None:
    """lipnb.report writes "8,760.6": compared as 8760.6 under the cell's tolerance (not as 8 and 760.6, whose
    second part moves by a thousand times the relative change); counts so written must still match exactly."""
    assert harmonize_text("| 8,760.6 |", "| 8,759.7 |", rtol=1e-3) == "| 8,760.6 |"
    assert harmonize_text("| 8,760.6 |", "| 8,699.7 |", rtol=1e-3) == "| 8,699.7 |"
    assert harmonize_text("12,288 tokens", "12,289 tokens") == "12,289 tokens"
    assert harmonize_text("(1,2)", "(1,2)") == "(1,2)" and harmonize_text("[0.5,0.7]", "[0.5,0.9]") == "[0.5,0.9]"
    assert unit_in_last_place("8,760.6") == pytest.approx(0.1) and unit_in_last_place("12,288") == 0.0
