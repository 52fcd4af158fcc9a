"""The glance page's reader of stored states, its verdicts and its list of published numbers."""

from __future__ import annotations

import json
from pathlib import Path

from lipnb.glance import CORRECTION_TARGETS, PUBLISHED, read_states, verdict


def test_read_states_reads_what_state_glued(tmp_path: Path) -> None:
    record = {"output_type": "display_data", "data": {"application/papermill.record/text/plain": "'0.92'"},
              "metadata": {"scrapbook": {"mime_prefix": "application/papermill.record/", "name": "drawn-C"}}}
    stream = {"output_type": "stream", "name": "stdout", "text": "holds: x | y | margin 1\n"}
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [stream, record]},
                                          {"cell_type": "markdown"}]}))
    assert read_states(path) == {"drawn-C": "0.92"}


def test_verdict_names_each_case() -> None:
    assert verdict(True, True).startswith("reproduced, as published and corrected")
    assert verdict(True, False).startswith("reproduced as published; differs")
    assert verdict(False, True).startswith("differs as published; holds")
    assert verdict(False, False).startswith("differs, as published and corrected")


def test_published_numbers_are_distinct_and_classified_targets_are_known() -> None:
    assert len({number.quantity for number in PUBLISHED}) == len(PUBLISHED)
    assert {who.split(" (")[0] for who in CORRECTION_TARGETS.values()} <= {
        "paper", "published code", "Kim et al.'s paper", "theory sheet", "the book itself"}
