"""nbval, with the numbers in checked outputs compared as numbers (a pytest plugin, loaded by entry point).

nbval compares a re-executed cell's outputs with the stored ones as strings, so ``238.3919677520401``
and ``238.39196775204005`` differ, and the book would pass only on the CPU that recorded it. This plugin
wraps ``nbval.plugin.IPyNbCell.compare_outputs``: in every text output (streams, ``text/plain``,
``text/html``, glued values) the text around the numbers must match exactly, and each number must match
its stored value within

    |new - stored| <= atol + rtol * |stored| + u,

where ``u`` is one unit in the last printed digit of either (a value printed as ``0.1303`` may print as
``0.1302`` after a change in the tenth digit; integers printed without a decimal point get no ``u``, so a
count must match exactly). The defaults are ``rtol = 1e-9`` and ``atol = 0``: closed forms and dense
linear algebra differ across CPU kernels in the last few bits only. A cell whose numbers come from an
iterative solver, an optimisation or a fit states a looser tolerance in its tags, ``nbval-rtol=1e-3`` or
``nbval-atol=1e-6``, next to ``nbval-check-output``. Numbers within tolerance are replaced by the stored
text before nbval compares, so a failure shows only the numbers that moved too far, and any change of
text.
"""

from __future__ import annotations

import copy
import math
import re
from collections import defaultdict
from collections.abc import Iterable

import pytest

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "harmonize_outputs", "harmonize_text", "tolerances", "unit_in_last_place"]

DEFAULT_RTOL = 1e-9
DEFAULT_ATOL = 0.0

# A decimal number not glued to a word: "log2" and "x1" are text, "0.6-1" is 0.6 and 1, "1e-12" is one number,
# and so is a power of ten as lipnb.report writes it ("3.4 × 10⁻⁷", "10⁻¹⁴", no-break spaces or plain ones).
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹"
# The space around "×" is a no-break space, or its escape "\xa0" in a glued value's stored repr.
_SPACE = r"(?:\u00a0|\\xa0| )"
_POWER = rf"(?:[-+−]?(?:\d+\.\d*|\d+){_SPACE}×{_SPACE})?−?10⁻?[{_SUPERSCRIPTS}]+"
# A number written with thousands separators ("8,760.6", "12,288") is one number; "1,2" and "0,100" are two.
_GROUPED = r"[1-9]\d{0,2}(?:,\d{3})+(?:\.\d*)?"
NUMBER = re.compile(
    rf"(?<![\w.])(?:{_POWER}|[-+−]?(?:{_GROUPED}|\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)(?![\w.])")
_AS_E = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹−", "-0123456789-")


def _e_notation(token: str) -> str:
    """``token`` in e-notation: "3.4 × 10⁻⁷" -> "3.4e-7", "10⁻¹⁴" -> "1e-14"; other numbers as they are, a minus
    sign ("−0.01", as lipnb.report writes it) as a hyphen."""
    if "10" not in token or not any(c in token for c in _SUPERSCRIPTS):
        return token.replace("−", "-").replace(",", "")
    mantissa, _, power = token.replace("\\xa0", " ").replace("\u00a0", " ").rpartition("10")
    mantissa = mantissa.replace("×", "").strip().translate(_AS_E)
    mantissa = {"": "1", "-": "-1"}.get(mantissa, mantissa)
    return f"{mantissa}e{power.translate(_AS_E)}"
_TAG = re.compile(r"^nbval-(rtol|atol)=(.+)$")


def unit_in_last_place(token: str) -> float:
    """One unit in the last printed digit of ``token`` ("0.1303" -> 1e-4, "2.5e-07" -> 1e-08); 0 for integers."""
    mantissa, _, exponent = _e_notation(token).lower().partition("e")
    if "." not in mantissa and not exponent:
        return 0.0
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _close(stored: str, new: str, rtol: float, atol: float) -> bool:
    a, b = float(_e_notation(stored)), float(_e_notation(new))
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    slack = atol + rtol * abs(a) + max(unit_in_last_place(stored), unit_in_last_place(new))
    return abs(a - b) <= slack * (1 + 1e-12)


def harmonize_text(stored: str, new: str, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> str:
    """``new`` with each number that matches its stored counterpart replaced by the stored text.

    When the text around the numbers differs, ``new`` is returned unchanged (the comparison fails on it).
    """
    if stored == new:
        return new
    stored_numbers, new_numbers = NUMBER.findall(stored), NUMBER.findall(new)
    if len(stored_numbers) != len(new_numbers) or NUMBER.split(stored) != NUMBER.split(new):
        return new
    pieces = NUMBER.split(new)
    out = [pieces[0]]
    for s, n, text in zip(stored_numbers, new_numbers, pieces[1:], strict=True):
        out.append(s if _close(s, n, rtol, atol) else n)
        out.append(text)
    return "".join(out)


def tolerances(tags: Iterable[str]) -> tuple[float, float]:
    """The cell's ``(rtol, atol)``: the defaults, or the values of its ``nbval-rtol=`` / ``nbval-atol=`` tags."""
    found = {"rtol": DEFAULT_RTOL, "atol": DEFAULT_ATOL}
    for tag in tags:
        m = _TAG.match(tag)
        if m is None:
            continue
        try:
            value = float(m[2])
        except ValueError:
            raise ValueError(f"cell tag {tag!r}: the tolerance must be a number") from None
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"cell tag {tag!r}: the tolerance must be finite and non-negative")
        found[m[1]] = value
    return found["rtol"], found["atol"]


def _texts(outputs: list) -> dict[tuple[str, str], list[tuple[dict, str]]]:
    """Each output's text fields, keyed like nbval pairs them: (stream, name) or (data, mimetype), in order."""
    fields: dict[tuple[str, str], list[tuple[dict, str]]] = defaultdict(list)
    for out in outputs:
        if out.get("output_type") == "stream":
            fields["stream", out.get("name", "")].append((out, "text"))
        for mime, value in out.get("data", {}).items():
            if isinstance(value, str) and not mime.startswith("image/"):
                fields["data", mime].append((out["data"], mime))
    return fields


def harmonize_outputs(new: list, stored: list, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> list:
    """A copy of the executed outputs ``new`` whose matching numbers carry the stored text (see the module)."""
    new = copy.deepcopy(new)
    stored_fields = _texts(stored)
    for key, targets in _texts(new).items():
        for (holder, field), (ref_holder, ref_field) in zip(targets, stored_fields.get(key, []), strict=False):
            ref = ref_holder[ref_field]
            if isinstance(ref, str):
                holder[field] = harmonize_text(ref, holder[field], rtol, atol)
    return new


def pytest_configure(config: pytest.Config) -> None:
    try:
        from nbval.plugin import IPyNbCell
    except ImportError:
        return
    if getattr(IPyNbCell.compare_outputs, "_numeric", False):
        return
    exact = IPyNbCell.compare_outputs

    def compare_outputs(self: IPyNbCell, test: list, ref: list, skip_compare: tuple | None = None) -> bool:
        rtol, atol = tolerances(self.cell.get("metadata", {}).get("tags", []))
        return exact(self, harmonize_outputs(test, ref, rtol, atol), ref, skip_compare)

    compare_outputs._numeric = True
    IPyNbCell.compare_outputs = compare_outputs
