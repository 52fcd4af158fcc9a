"""The recorded language-model experiment (lipnb.charlm_runs): its records are complete and carry their provenance."""

from __future__ import annotations

import pytest

from lipnb.charlm_runs import KINDS, RECORDS, SETTINGS, load_record, record_of, run_settings


@pytest.mark.parametrize("name", list(RECORDS))
def test_record_is_complete_with_provenance(name: str) -> None:
    record, spec = load_record(name), RECORDS[name]
    assert {(r["kind"], r["depth"]) for r in record["runs"]} == {(k, d) for k in KINDS for d in spec["depths"]}
    assert record["settings"]["config"]["steps"] == spec["steps"]
    assert record["settings"]["depths"] == list(spec["depths"])
    assert {"torch", "lipnb", "git"} <= set(record["versions"]) and record["machine"]["threads"] == 1
    assert "default" in record["replay_drift"]
    expected = list(range(SETTINGS["log_every"], spec["steps"] + 1, SETTINGS["log_every"]))
    for run in record["runs"]:
        logged = [row["step"] for row in run["rows"] if not row["diverged"]]
        assert logged == expected[: len(logged)]
        assert run["rows"][-1]["diverged"] or logged == expected  # a run stops early only where it diverged


def test_run_settings_follow_the_record_of_each_depth() -> None:
    assert run_settings(2).depth == 2 and run_settings(2).steps == RECORDS["agnews"]["steps"]
    assert record_of(12) == "agnews-deep" and run_settings(12).steps == RECORDS["agnews-deep"]["steps"]
    assert SETTINGS["depths"] == (1, 2, 4, 8, 12)
    with pytest.raises(ValueError, match="depth"):
        run_settings(3)
    with pytest.raises(ValueError, match="name"):
        load_record("ptb")
