"""The glance page's verdicts and its list of published numbers."""

from __future__ import annotations

from lipnb.glance import CORRECTION_TARGETS, PUBLISHED, verdict


def test_verdict_names_each_case() -> None:
    assert verdict(True, True).startswith("reproduced, as published and corrected")
    assert verdict(True, False).startswith("reproduced as published; differs")
    assert verdict(False, True).startswith("differs as published; holds")
    assert verdict(False, False).startswith("differs, as published and corrected")


def test_published_numbers_are_distinct_and_classified_targets_are_known() -> None:
    assert len({number.quantity for number in PUBLISHED}) == len(PUBLISHED)
    assert {who.split(" (")[0] for who in CORRECTION_TARGETS.values()} <= {
        "paper", "published code", "Kim et al.'s paper", "theory sheet", "the book itself"}
