"""The recorded language-model experiment (lipnb.experiments.charlm_runs): its records are complete and carry
their provenance."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import lambertw

from lipnb.experiments import charlm, charlm_runs, ngram
from lipnb.experiments.charlm_runs import (
    CHARLM_KINDS,
    CHARLM_RECORDS,
    CHARLM_SETTINGS,
    _record_of,
    charlm_kinds,
    charlm_record,
    charlm_seeds,
    run_settings,
)


@pytest.mark.parametrize("name", list(CHARLM_RECORDS))
def test_record_is_complete_with_provenance(name: str) -> None:
    record, spec = charlm_record(name), CHARLM_RECORDS[name]
    cells = {(k, d, s) for k in charlm_kinds(name) for d in spec["depths"] for s in charlm_seeds(name)}
    # each cell once, the shallower depths first, then by seed, then by kind
    order = sorted(cells, key=lambda c: (c[1], charlm_seeds(name).index(c[2]), charlm_kinds(name).index(c[0])))
    assert [(r["kind"], r["depth"], r.get("seed", 0)) for r in record["runs"]] == order
    assert record["settings"]["config"]["steps"] == spec["steps"]
    assert record["settings"]["depths"] == list(spec["depths"])
    assert record["settings"]["kinds"] == list(charlm_kinds(name))
    assert record["settings"].get("seeds", [0]) == list(charlm_seeds(name))
    assert {"torch", "lipnb", "git"} <= set(record["versions"]) and record["machine"]["threads"] == 1
    assert "default" in record["replay_drift"]
    expected = list(range(CHARLM_SETTINGS["log_every"], spec["steps"] + 1, CHARLM_SETTINGS["log_every"]))
    for run in record["runs"]:
        logged = [row["step"] for row in run["rows"] if not row["diverged"]]
        assert logged == expected[: len(logged)]
        assert run["rows"][-1]["diverged"] or logged == expected  # a run stops early only where it diverged


def test_run_settings_follow_the_record_of_each_depth() -> None:
    assert run_settings(2).depth == 2 and run_settings(2).steps == CHARLM_RECORDS["agnews"]["steps"]
    assert _record_of(12) == "agnews-deep" and run_settings(12).steps == CHARLM_RECORDS["agnews-deep"]["steps"]
    assert CHARLM_SETTINGS["depths"] == (1, 2, 4, 8, 12, 16, 24)
    assert _record_of(24) == "agnews-depth" and run_settings(24, 2).seed == 2
    assert run_settings(16, 1).steps == CHARLM_RECORDS["agnews-depth"]["steps"] and run_settings(16).seed == 0
    assert charlm_kinds("agnews") == CHARLM_KINDS and charlm_kinds("agnews-depth") == ("dot", "l2")
    assert charlm_seeds("agnews-deep") == (0,) and charlm_seeds("agnews-depth") == (0, 1, 2)
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
    monkeypatch.setitem(CHARLM_RECORDS, "tiny", {"depths": (5, 3), "steps": 4, "kinds": ("l2", "dot"), "seeds": (5, 0)})
    monkeypatch.setitem(CHARLM_SETTINGS, "config", replace(CHARLM_SETTINGS["config"], d=8, heads=2, context=8, batch=4))
    monkeypatch.setitem(CHARLM_SETTINGS, "log_every", 2)
    monkeypatch.setitem(CHARLM_SETTINGS, "valid_chars", 200)


def test_seeded_record_trains_every_cell_shallower_depths_first(tiny: None, tmp_path: Path) -> None:
    out = tmp_path / "tiny.json"
    assert charlm_runs._main(["--record", "tiny", "--out", str(out)]) == 0
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
    charlm_runs._main(["--record", "tiny", "--out", str(out)])
    record = json.loads(out.read_text())
    for run in record["runs"]:
        if run["seed"] == 0:
            del run["seed"]  # a run recorded before seeds existed has seed 0
    out.write_text(json.dumps(record))
    capability = torch.backends.cpu.get_cpu_capability().lower()
    assert charlm_runs._main(["--record", "tiny", "--out", str(out), "--drift"]) == 0
    drift = json.loads(out.read_text())["replay_drift"][capability]
    assert drift["max_abs_bpc"] == 0.0 and drift["per_run_max_abs_bpc"] == [0.0] * len(record["runs"])
    # a record whose seed-5 curves were swapped with seed 0's: the drift sees it
    record["runs"][0]["rows"], record["runs"][2]["rows"] = record["runs"][2]["rows"], record["runs"][0]["rows"]
    out.write_text(json.dumps(record))
    charlm_runs._main(["--record", "tiny", "--out", str(out), "--drift"])
    drift = json.loads(out.read_text())["replay_drift"][capability]
    assert [d > 0 for d in drift["per_run_max_abs_bpc"]] == [True, False, True] + [False] * 5
    assert drift["max_abs_bpc"] == max(drift["per_run_max_abs_bpc"])


def test_curve_readers() -> None:
    """``first_step_below``, ``loss_rises`` and ``logged_value`` on a hand-made curve (a diverged row is skipped)."""
    curve = [{"step": 0, "train_bpc": 4.0, "valid_bpc": 4.1, "diverged": False},
             {"step": 25, "train_bpc": 3.0, "valid_bpc": 3.2, "diverged": False},
             {"step": 50, "train_bpc": 9.0, "valid_bpc": 1.0, "diverged": True},
             {"step": 75, "train_bpc": 3.5, "valid_bpc": 2.9, "diverged": False}]
    assert charlm_runs.first_step_below(curve, 3.0) == 75 and charlm_runs.first_step_below(curve, 2.0) is None
    assert charlm_runs.loss_rises(curve) == [(25, -1.0), (75, 0.5)]
    assert charlm_runs.loss_rises(curve, "valid_bpc") == [(25, pytest.approx(-0.9)), (75, pytest.approx(-0.3))]
    assert charlm_runs.logged_value(curve, 25) == 3.2 and charlm_runs.logged_value(curve, 25, "train_bpc") == 3.0
    with pytest.raises(ValueError, match="no step 50"):
        charlm_runs.logged_value(curve, 50)


def test_curve_table_reads_each_run() -> None:
    """One row per run, every column computed by hand from two hand-made curves."""
    a = [{"step": 25, "train_bpc": 4.0, "valid_bpc": 4.1, "diverged": False},
         {"step": 50, "train_bpc": 3.0, "valid_bpc": 3.2, "diverged": False},
         {"step": 75, "train_bpc": 3.6, "valid_bpc": 3.9, "diverged": False},
         {"step": 100, "train_bpc": 2.5, "valid_bpc": 2.8, "diverged": False}]
    b = [{"step": 25, "train_bpc": 5.0, "valid_bpc": 5.0, "diverged": False},
         {"step": 50, "train_bpc": math.inf, "valid_bpc": math.inf, "diverged": True}]
    table = charlm_runs.curve_table({("dot", 2, 0): a, ("l2", 4, 1): b}, at=25, levels=(3.0, 4.5))
    rows = table.frame.to_dict("records")
    assert [(r["kind"], r["depth"], r["seed"]) for r in rows] == [("dot", 2, 0), ("l2", 4, 1)]
    assert rows[0]["last_step"] == 100 and rows[0]["diverged"] == 0 and rows[1]["diverged"] == 1
    assert (rows[0]["valid_first"], rows[0]["valid_last"], rows[0]["valid_best"]) == (4.1, 2.8, 2.8)
    assert rows[0]["train_first"] == 4.0 and rows[1]["train_first"] == 5.0
    assert rows[0]["train_rise"] == pytest.approx(0.6) and rows[0]["train_rise_step"] == 75
    assert rows[0]["valid_rise"] == pytest.approx(0.7) and rows[0]["valid_rise_step"] == 75
    assert rows[0]["valid_at"] == 4.1 and rows[1]["valid_at"] == 5.0
    assert rows[0]["below_0"] == 100 and rows[0]["below_1"] == 25
    assert math.isnan(rows[1]["below_0"]) and math.isnan(rows[1]["below_1"])
    assert rows[1]["train_rise"] == 0.0 and rows[1]["valid_last"] == 5.0  # one finite row: no rise
    falling = [{"step": s, "train_bpc": 4.0 - s / 100, "valid_bpc": 4.0, "diverged": False} for s in (25, 50, 75)]
    row = charlm_runs.curve_table({("dot", 1, 0): falling}).frame.iloc[0]
    assert (row.train_rise, row.train_rise_step) == (0.0, 25)  # a loss that only falls never rises
    assert (row.valid_rise, row.valid_rise_step) == (0.0, 25)


def test_replay_first_steps_beside_the_record(tiny: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "tiny.json"
    charlm_runs._main(["--record", "tiny", "--out", str(out)])
    monkeypatch.setattr(charlm_runs, "_record_path", lambda name: out)
    table = charlm_runs.replay_first_steps([("dot", 3, 5), ("l2", 5, 0)])
    rows = table.frame.to_dict("records")
    record = {(r["kind"], r["depth"], r["seed"]): r["rows"][0] for r in json.loads(out.read_text())["runs"]}
    for row in rows:
        ref = record[row["kind"], row["depth"], row["seed"]]
        assert (row["train_record"], row["valid_record"]) == (ref["train_bpc"], ref["valid_bpc"])
        assert (row["train_rerun"], row["valid_rerun"]) == (ref["train_bpc"], ref["valid_bpc"])


def test_contractive_divisors_are_the_bound_of_a_fresh_model(tiny: None) -> None:
    """Each block's divisor: the sharpened 2-norm bound of Theorem 3.2 at the context length, recomputed here from
    the weights' singular values (numpy), for the model built with the run's seed."""
    table = charlm_runs.contractive_divisors([3])
    config = charlm_runs.run_settings(3)
    torch.manual_seed(config.seed)
    model = charlm.CharLM(7, config, "l2-contractive")
    n, k = config.context, config.d // config.heads
    lam = float(lambertw((n - 1) / math.e).real)
    expected = []
    for block in model.blocks:
        attn = block["attn"]
        q = [np.linalg.svd(m.detach().double().numpy(), compute_uv=False)[0] for m in attn.Q]
        v = [np.linalg.svd(m.detach().double().numpy(), compute_uv=False)[0] for m in attn.V]
        o = np.linalg.svd(attn.O.detach().double().numpy(), compute_uv=False)[0]
        weights = math.sqrt(sum(a**4 * b**2 for a, b in zip(q, v, strict=True))) * o
        expected.append(max(1.0, math.sqrt(n) / math.sqrt(k) * (2 * math.sqrt(2) * lam + 1) * weights))
    assert table.frame["depth"].tolist() == [3, 3, 3] and table.frame["block"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(table.frame["divisor"].to_numpy(), expected, rtol=1e-5)


def test_charlm_baselines_are_the_ngram_scores(tiny: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    train, valid, _ = charlm_runs.agnews_corpus()
    table = charlm_runs.charlm_baselines((1, 2, 3))
    scored = valid[:200]
    assert table.frame["order"].tolist() == [1, 2, 3]
    for n, row in zip((1, 2, 3), table.frame.to_dict("records"), strict=True):
        assert row["add_one"] == pytest.approx(charlm.ngram_bits_per_char(train, scored, 7, n), rel=1e-12)
        assert row["kneser_ney"] == pytest.approx(ngram.kneser_ney_bits_per_char(train, scored, 7, n), rel=1e-12)
        assert row["kneser_ney_windows"] == pytest.approx(
            ngram.kneser_ney_window_bits_per_char(train, scored, 7, n, 8), rel=1e-12)
    # past order 2 the windows cost bits: the first characters of each window lose their context
    assert table.frame["kneser_ney_windows"][2] > table.frame["kneser_ney"][2]
