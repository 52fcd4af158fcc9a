"""The recorded language-model experiment (lipnb.experiments.charlm_runs): its records are complete and carry
their provenance."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lipnb.experiments import charlm_runs
from lipnb.experiments.charlm_runs import (
    KINDS,
    RECORDS,
    SETTINGS,
    charlm_record,
    kinds_of,
    record_of,
    run_settings,
    seeds_of,
)


@pytest.mark.parametrize("name", list(RECORDS))
def test_record_is_complete_with_provenance(name: str) -> None:
    record, spec = charlm_record(name), RECORDS[name]
    cells = {(k, d, s) for k in kinds_of(name) for d in spec["depths"] for s in seeds_of(name)}
    # each cell once, the shallower depths first, then by seed, then by kind
    order = sorted(cells, key=lambda c: (c[1], seeds_of(name).index(c[2]), kinds_of(name).index(c[0])))
    assert [(r["kind"], r["depth"], r.get("seed", 0)) for r in record["runs"]] == order
    assert record["settings"]["config"]["steps"] == spec["steps"]
    assert record["settings"]["depths"] == list(spec["depths"])
    assert record["settings"]["kinds"] == list(kinds_of(name))
    assert record["settings"].get("seeds", [0]) == list(seeds_of(name))
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
    assert SETTINGS["depths"] == (1, 2, 4, 8, 12, 16, 24)
    assert record_of(24) == "agnews-depth" and run_settings(24, 2).seed == 2
    assert run_settings(16, 1).steps == RECORDS["agnews-depth"]["steps"] and run_settings(16).seed == 0
    assert kinds_of("agnews") == KINDS and kinds_of("agnews-depth") == ("dot", "l2")
    assert seeds_of("agnews-deep") == (0,) and seeds_of("agnews-depth") == (0, 1, 2)
    with pytest.raises(ValueError, match="depth"):
        run_settings(3)
    with pytest.raises(ValueError, match="seed"):
        run_settings(8, 1)  # the record at depth 8 has seed 0 only
    with pytest.raises(ValueError, match="name"):
        charlm_record("ptb")


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record ``tiny`` of two depths, two kinds and two seeds, a few steps of a small model on a synthetic text."""
    g = torch.Generator().manual_seed(0)
    text = torch.randint(0, 7, (4000,), generator=g)
    monkeypatch.setattr(charlm_runs, "agnews_corpus", lambda: (text[:3000], text[3000:], list("abcdefg")))
    monkeypatch.setitem(RECORDS, "tiny", {"depths": (5, 3), "steps": 4, "kinds": ("l2", "dot"), "seeds": (5, 0)})
    monkeypatch.setitem(SETTINGS, "config", replace(SETTINGS["config"], d=8, heads=2, context=8, batch=4))
    monkeypatch.setitem(SETTINGS, "log_every", 2)
    monkeypatch.setitem(SETTINGS, "valid_chars", 200)


def test_seeded_record_trains_every_cell_shallower_depths_first(tiny: None, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    assert charlm_runs.main(["--record", "tiny", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [(r["depth"], r["seed"], r["kind"]) for r in record["runs"]] == [
        (3, 5, "l2"), (3, 5, "dot"), (3, 0, "l2"), (3, 0, "dot"),
        (5, 5, "l2"), (5, 5, "dot"), (5, 0, "l2"), (5, 0, "dot")]
    assert record["settings"]["seeds"] == [5, 0] and record["settings"]["kinds"] == ["l2", "dot"]
    runs = {(r["kind"], r["depth"], r["seed"]): r["rows"] for r in record["runs"]}
    assert all([row["step"] for row in rows] == [2, 4] for rows in runs.values())
    # another seed, another initialisation and other batches: other curves
    assert runs["dot", 3, 5][0]["train_bpc"] != runs["dot", 3, 0][0]["train_bpc"]
    # the same seed, re-run: the same first row, exactly
    again = charlm_runs.replay_charlm("dot", 3, 2, seed=5)[0]
    assert (again["train_bpc"], again["valid_bpc"]) == (runs["dot", 3, 5][0]["train_bpc"],
                                                        runs["dot", 3, 5][0]["valid_bpc"])
    with pytest.raises(ValueError, match="seed"):
        charlm_runs.replay_charlm("dot", 3, 2, seed=1)


def test_drift_replays_each_run_with_its_own_seed(tiny: None, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    charlm_runs.main(["--record", "tiny", "--out", str(out)])
    record = json.loads(out.read_text())
    for run in record["runs"]:
        if run["seed"] == 0:
            del run["seed"]  # a run recorded before seeds existed has seed 0
    out.write_text(json.dumps(record))
    capability = torch.backends.cpu.get_cpu_capability().lower()
    assert charlm_runs.main(["--record", "tiny", "--out", str(out), "--drift"]) == 0
    drift = json.loads(out.read_text())["replay_drift"][capability]
    assert drift["max_abs_bpc"] == 0.0 and drift["per_run_max_abs_bpc"] == [0.0] * len(record["runs"])
    # a record whose seed-5 curves were swapped with seed 0's: the drift sees it
    record["runs"][0]["rows"], record["runs"][2]["rows"] = record["runs"][2]["rows"], record["runs"][0]["rows"]
    out.write_text(json.dumps(record))
    charlm_runs.main(["--record", "tiny", "--out", str(out), "--drift"])
    drift = json.loads(out.read_text())["replay_drift"][capability]
    assert [d > 0 for d in drift["per_run_max_abs_bpc"]] == [True, False, True] + [False] * 5
    assert drift["max_abs_bpc"] == max(drift["per_run_max_abs_bpc"])


def test_curve_readers() -> None:
    """``first_below``, ``rises`` and ``value_at`` on a hand-made curve (a diverged row is skipped)."""
    curve = [{"step": 0, "train_bpc": 4.0, "valid_bpc": 4.1, "diverged": False},
             {"step": 25, "train_bpc": 3.0, "valid_bpc": 3.2, "diverged": False},
             {"step": 50, "train_bpc": 9.0, "valid_bpc": 1.0, "diverged": True},
             {"step": 75, "train_bpc": 3.5, "valid_bpc": 2.9, "diverged": False}]
    assert charlm_runs.first_below(curve, 3.0) == 75 and charlm_runs.first_below(curve, 2.0) is None
    assert charlm_runs.rises(curve) == [(25, -1.0), (75, 0.5)]
    assert charlm_runs.value_at(curve, 25) == 3.2 and charlm_runs.value_at(curve, 25, "train_bpc") == 3.0
    with pytest.raises(ValueError, match="no step 50"):
        charlm_runs.value_at(curve, 50)
