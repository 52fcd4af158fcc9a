"""Counts in words, as the book's prose writes them: :func:`counted` gives "no values", "one check", "two
threads", "12 windows", so that no sentence, table or workload name reads "0 values" or "1 hold"."""

from __future__ import annotations

__all__ = ["counted"]

_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` with its noun, in words below ten: "no values", "one value", "12 values", "1,024 values"
    (``plural`` defaults to ``singular`` + "s")."""
    if hasattr(count, "item"):
        count = count.item()
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"counted: a count is a non-negative int, not {count!r}")
    if not isinstance(singular, str) or not singular or not isinstance(plural, str | None):
        raise TypeError("counted: the noun is a non-empty str")
    noun = singular if count == 1 else plural or singular + "s"
    return f"{_WORDS[count] if count < len(_WORDS) else format(count, ',')} {noun}"
