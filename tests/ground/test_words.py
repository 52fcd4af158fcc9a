"""``lipnb.words.counted``: a count and its noun as the prose writes them, against the rule spelled out here."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb.report import counted as published
from lipnb.words import counted

WORDS = "no one two three four five six seven eight nine".split()


@given(st.integers(min_value=0, max_value=10**7))
def test_a_count_is_a_word_below_ten_and_a_number_with_separators_above(count: int) -> None:
    text = counted(count, "value")
    number, noun = text.split(" ")
    assert noun == ("value" if count == 1 else "values")
    if count < 10:
        assert number == WORDS[count]
    else:
        assert number.replace(",", "") == str(count) and number == f"{count:,}"


def test_an_irregular_plural_and_a_tensor_count() -> None:
    assert counted(0, "matrix", "matrices") == "no matrices"
    assert counted(1, "matrix", "matrices") == "one matrix"
    assert counted(torch.tensor(12), "head") == "12 heads"
    assert counted(1024, "window") == "1,024 windows"


def test_the_report_floor_publishes_the_same_function() -> None:
    assert published is counted


@pytest.mark.parametrize("count", [-1, 1.0, True, "3", None])
def test_a_count_that_is_not_a_non_negative_int_is_refused(count: object) -> None:
    with pytest.raises(ValueError, match="non-negative int"):
        counted(count, "value")  # type: ignore[arg-type]


@pytest.mark.parametrize(("singular", "plural"), [("", None), (3, None), ("value", 2)])
def test_a_noun_that_is_not_text_is_refused(singular: object, plural: object) -> None:
    with pytest.raises(TypeError, match="noun"):
        counted(2, singular, plural)  # type: ignore[arg-type]
