"""Numbers as a reader reads them: Python's e-notation ("3e-07", "1.5e+05") written as a power of ten
("3 × 10⁻⁷", "1.5 × 10⁵", with no-break spaces around the ×), and a negative number's hyphen written as a minus
sign ("-0.01" → "−0.01"), in glued text, table cells and the ledger."""

from __future__ import annotations

import re

__all__ = ["as_written"]

# A number in e-notation as Python's formats write it (the exponent always signed), not part of a longer word.
_E_NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)e([+-])0*(\d+)(?![\w.])")
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
# A hyphen that is a number's sign: before a digit, not after a word, a digit, a point or a closing bracket (so
# "0.6-1", "2026-11-28", "x-1" and "GPT-2" keep theirs).
_SIGN = re.compile(r"(?<![\w.)\]])-(?=\.?\d)")


def _written(match: re.Match[str]) -> str:
    mantissa, sign, digits = match.groups()
    if digits == "0":
        return mantissa.replace("-", "−")
    power = "10" + ("-" + digits if sign == "-" else digits).translate(_SUPERSCRIPT)
    if mantissa in ("1", "-1"):
        return power if mantissa == "1" else "−" + power
    return f"{mantissa.replace('-', '−')}\u00a0×\u00a0{power}"  # no-break spaces: one unit on one line


def as_written(text: str) -> str:
    """``text`` with every number in e-notation written as a power of ten ("below 1e-14" → "below 10⁻¹⁴") and a
    negative number's sign as a minus ("-0.01" → "−0.01")."""
    if not isinstance(text, str):
        raise TypeError(f"as_written: text is a str, not {type(text).__name__}")
    return _SIGN.sub("−", _E_NUMBER.sub(_written, text))
