"""The recorded language-model experiment (lipnb.charlm_runs): its record is complete and carries its provenance."""

from __future__ import annotations

import pytest

from lipnb.charlm_runs import KINDS, SETTINGS, load_record, run_settings


def test_record_is_complete_with_provenance() -> None:
    record = load_record()
    assert {(r["kind"], r["depth"]) for r in record["runs"]} == {(k, d) for k in KINDS for d in SETTINGS["depths"]}
    assert record["settings"]["config"]["steps"] == SETTINGS["config"].steps
    assert {"torch", "lipnb", "git"} <= set(record["versions"]) and record["machine"]["threads"] == 1
    assert "default" in record["replay_drift"]
    for run in record["runs"]:
        steps = [row["step"] for row in run["rows"]]
        assert steps == list(range(SETTINGS["log_every"], SETTINGS["config"].steps + 1, SETTINGS["log_every"]))


def test_run_settings_refuses_unrecorded_depths() -> None:
    assert run_settings(2).depth == 2
    with pytest.raises(ValueError, match="depth"):
        run_settings(3)
