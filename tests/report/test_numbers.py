"""Numbers as a reader reads them: e-notation becomes a power of ten that reads back as the same number."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lipnb import report
from lipnb.report.numbers import as_written

_DIGITS = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")


def _read_back(text: str) -> float:
    """The number a reader sees in ``as_written``'s text, parsed independently of it."""
    text = text.replace("−", "-").replace("\u00a0", " ")
    if "10" in text and text.translate(_DIGITS) != text:
        mantissa, _, power = text.rpartition("10")
        mantissa = mantissa.replace("×", "").strip()
        mantissa = {"": "1", "-": "-1"}.get(mantissa, mantissa)
        return float(mantissa) * 10.0 ** int(power.translate(_DIGITS))
    return float(text)


@pytest.mark.parametrize(("text", "written"), [
    ("3e-07", "3\u00a0×\u00a010⁻⁷"), ("below 1e-14", "below 10⁻¹⁴"), ("2.6e-03", "2.6\u00a0×\u00a010⁻³"),
    ("1.615e+05", "1.615\u00a0×\u00a010⁵"), ("-4.5e-15", "−4.5\u00a0×\u00a010⁻¹⁵"), ("rtol 1e-04, ok", "rtol 10⁻⁴, ok"),
    ("2e+00", "2"), ("0.5", "0.5"), ("gpt2-random", "gpt2-random"), ("3e5a", "3e5a"), ("x1e-4", "x1e-4"),
    # a negative number's sign is a minus; a hyphen between words, digits or in a range stays one
    ("-0.01", "−0.01"), ("[-0.06, 0.02]", "[−0.06, 0.02]"), ("0.6-1", "0.6-1"), ("2026-11-28", "2026-11-28"),
    ("GPT-2", "GPT-2"), ("n - 1", "n - 1"), ("x-1", "x-1"),
])
def test_e_notation_is_written_as_a_power_of_ten(text: str, written: str) -> None:
    assert as_written(text) == written


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
       st.sampled_from([".3g", ".2g", ".1e", ".0e", ".3e", "g"]))
def test_the_written_number_reads_back_as_the_formatted_one(x: float, fmt: str) -> None:
    formatted = format(x, fmt)
    assert math.isclose(_read_back(as_written(formatted)), float(formatted), rel_tol=1e-12, abs_tol=0)


def test_state_and_tables_write_powers_of_ten() -> None:
    assert report.state("tiny", 3e-7) == "3\u00a0×\u00a010⁻⁷"
    table = report.markdown_table([{"error": 4.5e-15}], caption="An error below 1e-14")
    shown = table.to_html()
    assert "4.5\u00a0×\u00a010⁻¹⁵" in shown and "e-15" not in shown and "below 10⁻¹⁴" in shown


def test_as_written_refuses_what_is_not_text() -> None:
    with pytest.raises(TypeError, match="is a str"):
        as_written(3e-7)  # type: ignore[arg-type]
