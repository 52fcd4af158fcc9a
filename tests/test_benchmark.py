"""lipnb.experiments.benchmark: the paper's loop (App. E.1) and the recorded benchmark runs shipped with lipnb."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lipnb.experiments import benchmark
from lipnb.paper import published


def test_paper_loop_finds_a_known_norm_and_stops_on_its_own_rule() -> None:
    """On ``X -> D ⊙ X`` (``Lip = max |D|``) the paper's power iteration converges to ``max |D|``; a
    spectrum without a gap at the top stops it within 100 steps anyway, on the change of its estimate."""
    D = torch.ones(1, 6, 4, dtype=torch.float64)
    D[0, 2, 1] = 3.0
    x = torch.randn(1, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    value, steps = published.paper_power_iteration(lambda Z: Z * D, x)
    assert abs(value - 3.0) < 1e-4 and 2 <= steps < published.PAPER_MAX_ITER
    D[0, 3, 2] = 3.0 - 1e-9                       # two almost equal top values: still stops
    assert published.paper_power_iteration(lambda Z: Z * D, x)[1] < published.PAPER_MAX_ITER


def test_oracle_stop_is_the_first_step_within_rtol_of_the_target() -> None:
    """With ``target`` the loop stops at the first step within ``rtol`` of it, not on its own test: on a
    spectrum with a small gap at the top (3 and 2.97) its own test stops short of 1e-4, the oracle at 1e-4
    (and no earlier step was that close); without reaching the target it runs ``max_iter`` steps."""
    D = torch.ones(1, 6, 4, dtype=torch.float64)
    D[0, 2, 1], D[0, 4, 3] = 3.0, 2.97
    x = torch.randn(1, 6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    fn = lambda Z: Z * D                                                     # noqa: E731
    own, own_steps = published.paper_power_iteration(fn, x)
    assert abs(own / 3 - 1) > 1e-4
    value, steps = published.paper_power_iteration(fn, x, target=3.0, max_iter=2000)
    assert abs(value / 3 - 1) <= 1e-4 and steps > own_steps
    before, _ = published.paper_power_iteration(fn, x, target=3.0, max_iter=steps - 1)
    assert abs(before / 3 - 1) > 1e-4
    assert published.paper_power_iteration(fn, x, target=4.0, max_iter=7)[1] == 7


def test_records_ship_with_lipnb_and_tabulate() -> None:
    """The committed records are found without the repository (package data) and tabulate one line
    per (run, method), as HTML for Jupyter and Markdown for print; the speedup is fewer FLOPs times
    faster FLOPs."""
    assert benchmark.records_dir().parent == Path(benchmark.__file__).parent
    record = benchmark.load_record("lipschitz-cpu")
    assert record is not None
    table = benchmark.table(record)
    assert len(table.rows) == sum(len(row["methods"]) for row in record["runs"])
    assert table._repr_html_().startswith("<table>") and str(table).startswith("| model |")
    assert all(len(line) == len(table.header) for line in table.rows)
    row = record["runs"][0]
    ratio = benchmark.decomposition(row)        # the speedup splits exactly into its two factors
    assert ratio["speedup"] == row["speedup"]["lipnb"]
    assert ratio["speedup"] == pytest.approx(ratio["flops"] * ratio["rate"], rel=1e-9)
    paper, ours = row["methods"]["paper"], row["methods"]["lipnb"]
    assert benchmark.cpu_speedup(row) == paper["median_cpu_s"] / ours["median_cpu_s"]
    assert benchmark.cpu_speedup(row, "paper") is None


def test_records_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LIPNB_BENCH_DIR`` names another folder: records are read from it, missing ones are ``None``."""
    monkeypatch.setenv(benchmark.ENV_VAR, str(tmp_path))
    assert benchmark.records_dir() == tmp_path and benchmark.load_record("lipschitz-cpu") is None
    benchmark.record_path("mine").write_text(json.dumps({"runs": []}))
    assert benchmark.load_record("mine") == {"runs": []}
    assert benchmark.relative_errors([1.1, 0.9], [1.0, 1.0]) == pytest.approx([0.1, 0.1])


def test_workload_record_ships_and_tabulates() -> None:
    """``bench/workloads.py``'s record (both workloads, one run) ships with lipnb and tabulates one line per
    (workload, call); its speedups are the paper's medians over each call's, and each call's time split
    adds up to its total."""
    record = benchmark.load_record("lipschitz-cpu-workloads")
    assert record is not None and {row["workload"] for row in record["runs"]} >= {"chapter-10", "issue-23"}
    table = benchmark.workload_table(record)
    assert len(table.rows) == sum(len(row["methods"]) for row in record["runs"])
    for row in record["runs"]:
        paper = row["methods"]["paper"]
        oracle = row["methods"]["paper-oracle"]
        calls = benchmark.lipnb_calls(row)
        assert set(calls) == set(record["calls"]) and set(row["methods"]) - set(calls) == set(benchmark.PAPER_BASELINES)
        for method, v in calls.items():
            assert row["speedup"][method]["cpu"] == pytest.approx(paper["cpu"]["median"] / v["cpu"]["median"])
            assert row["speedup_oracle"][method]["wall"] == pytest.approx(oracle["wall"]["median"]
                                                                          / v["wall"]["median"])
            split = v["split"]
            parts = split["linearize_cpu_s"] + split["products_cpu_s"] + split["solver_cpu_s"]
            assert parts == pytest.approx(split["cpu_s"])
