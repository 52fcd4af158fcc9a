"""lipnb.experiments.benchmark: the paper's loop (App. E.1) and the recorded benchmark runs shipped with lipnb."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from lipnb.experiments import benchmark
from lipnb.experiments.benchmark_schema import LipschitzRecord, PaperProfileRecord, SweepTiming, WorkloadRecord
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


RECORDS = {"lipschitz-cpu": LipschitzRecord, "lipschitz-cpu-kinds": LipschitzRecord,
           "lipschitz-cpu-gpt2": LipschitzRecord, "lipschitz-cuda": LipschitzRecord,
           "lipschitz-cpu-workloads": WorkloadRecord, "paper-profile-cuda": PaperProfileRecord}


def _unread_keys(raw: object, parsed: object, path: str = "") -> list[str]:
    """The JSON keys of ``raw`` that its record ``parsed`` leaves out (a typed field for every key)."""
    if isinstance(raw, dict) and dataclasses.is_dataclass(parsed):
        names = {f.name for f in dataclasses.fields(parsed)}
        return [f"{path}.{k}" for k in raw if k not in names] + [
            miss for k in raw if k in names for miss in _unread_keys(raw[k], getattr(parsed, k), f"{path}.{k}")]
    if isinstance(raw, dict) and isinstance(parsed, dict):
        return [miss for k in raw for miss in _unread_keys(raw[k], parsed[k], f"{path}[{k!r}]")]
    if isinstance(raw, list) and isinstance(parsed, tuple):
        return [miss for i, (r, p) in enumerate(zip(raw, parsed, strict=True))
                for miss in _unread_keys(r, p, f"{path}[{i}]")]
    assert raw == parsed, path          # a number, text or flag: as recorded
    return []


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_every_shipped_record_parses_into_its_type(name: str) -> None:
    """Every record shipped with lipnb loads as its typed record (by its content), every JSON key a field."""
    record = benchmark.benchmark_record(name)
    assert type(record) is RECORDS[name] and record.runs
    raw = json.loads(benchmark.record_path(name).read_text())
    assert _unread_keys(raw, record) == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.date = "today"                                                # type: ignore[misc]


def test_a_missing_field_is_a_value_error_naming_the_record_and_field() -> None:
    """A record without one of its fields does not load half-way: the error names the record and the field,
    as does a field of the wrong shape."""
    raw = json.loads(benchmark.record_path("lipschitz-cpu").read_text())
    del raw["runs"][1]["methods"]["paper"]["median_cpu_s"]
    message = "benchmark record lipschitz-cpu.json: the field runs[1].methods['paper'].median_cpu_s is missing"
    with pytest.raises(ValueError, match=re.escape(message)):
        LipschitzRecord.from_json(raw, "lipschitz-cpu.json")
    work = json.loads(benchmark.record_path("lipschitz-cpu-workloads").read_text())
    del work["runs"][0]["speedup_oracle"]
    with pytest.raises(ValueError, match=r"record mine: the field runs\[0\]\.speedup_oracle is missing"):
        WorkloadRecord.from_json(work, "mine")
    with pytest.raises(ValueError, match="WorkloadRecord: runs should be a JSON list, not int"):
        WorkloadRecord.from_json(work | {"runs": 3})


def test_records_ship_with_lipnb_and_tabulate() -> None:
    """The committed records are found without the repository (package data) and tabulate one row per
    (run, method), headers in words, CPU time on a CPU record and wall-clock time on a GPU one, the speedup
    the paper's median over the method's; the speedup is fewer FLOPs times faster FLOPs."""
    assert benchmark._records_dir().parent == Path(benchmark.__file__).parent
    record = benchmark.benchmark_record("lipschitz-cpu")
    assert isinstance(record, LipschitzRecord)
    rows = benchmark.benchmark_table(record)
    assert len(rows) == sum(len(row.methods) for row in record.runs)
    assert all(list(r) == list(rows[0]) for r in rows) and "speedup" in rows[0]
    assert not any("_" in header or "kind" in header for header in rows[0])
    first = record.runs[0]
    assert rows[1]["map"] == f"MiniLM layer {first.layer}, self-attention module" and rows[1]["n"] == str(first.n)
    method = list(first.methods)[1]
    assert float(rows[1]["speedup"]) == pytest.approx(benchmark.cpu_speedup(first, method), abs=0.05)
    assert rows[0]["speedup"] == "baseline" and rows[0]["method"] == "paper's loop"
    first_error = first.methods["paper"].max_rel_error
    assert rows[0]["largest error"] == benchmark.error_percent(first_error)
    gpu = benchmark.benchmark_record("lipschitz-cuda")
    assert isinstance(gpu, LipschitzRecord)
    gpu_rows = benchmark.benchmark_table(gpu)
    run = gpu.runs[0]
    assert float(gpu_rows[1]["ms per estimate"]) == pytest.approx(
        1e3 * list(run.methods.values())[1].per_input_s, abs=0.05)
    assert float(gpu_rows[1]["speedup"]) == pytest.approx(run.speedup[list(run.methods)[1]], abs=0.05)
    row = record.runs[0]
    ratio = benchmark.speedup_decomposition(row)    # the CPU-time speedup splits into its two factors
    assert ratio["speedup"] == benchmark.cpu_speedup(row)
    assert ratio["speedup"] == pytest.approx(ratio["flops"] * ratio["rate"], rel=1e-9)
    paper, ours = row.methods["paper"], row.methods["lipnb"]
    # the rate factor is the ratio of FLOPs per CPU second, from the record's own operation counts and times
    flops_paper = paper.flops_per_product * paper.mean_iterations
    flops_ours = (ours.flops_per_product * (ours.mean_iterations + ours.mean_presolve_iterations)
                  + ours.flops_linearize)
    rate = (flops_ours / ours.median_cpu_s) / (flops_paper / paper.median_cpu_s)
    assert ratio["rate"] == pytest.approx(rate, rel=1e-9)
    with pytest.raises(ValueError, match="paper's loop"):
        benchmark.speedup_decomposition(row, "paper")
    assert benchmark.cpu_speedup(row) == paper.median_cpu_s / ours.median_cpu_s
    assert benchmark.cpu_speedup(row, "paper") is None


def test_provenance_is_one_line_of_when_where_and_with_what() -> None:
    """The GPU record's provenance: its date, device, threads, load, versions and matrix-product peaks."""
    gpu = benchmark.benchmark_record("lipschitz-cuda")
    assert isinstance(gpu, LipschitzRecord) and gpu.provenance_note
    line = benchmark.benchmark_provenance(gpu)
    assert line.startswith(f"{gpu.date[:10]}, {gpu.device_name} (cuda, {gpu.threads} threads, load average ")
    assert f"torch {gpu.versions.torch}, lipnb {gpu.versions.lipnb}, matrix-product peaks" in line
    assert gpu.versions.git not in line
    assert "\n" not in line and line.endswith(" GFLOP/s") and "float32" in line


def test_paper_profile_seconds_sums_what_ran_and_extrapolates_the_rest() -> None:
    """Per kind of sweep: the measured seconds, their mean, and a total that counts each sweep that did not run
    at its kind's mean (here 10 + 20 measured, 3 + 5 measured and two adversarial sweeps at 4 s); a kind with
    nothing measured is refused, not guessed."""
    record = benchmark.benchmark_record("paper-profile-cuda")
    assert isinstance(record, PaperProfileRecord)
    runs = (SweepTiming("real_text a", 5, True, 50, 10.0), SweepTiming("real_text b", 5, True, 50, 20.0),
            SweepTiming("adversarial layer 0", 8, True, 8, 3.0), SweepTiming("adversarial layer 1", 8, True, 8, 5.0),
            SweepTiming("adversarial layer 2", 8, False), SweepTiming("adversarial layer 3", 8, False))
    seconds = benchmark.paper_profile_seconds(dataclasses.replace(record, runs=runs))
    assert seconds == {"real_text": 30.0, "real_text per sweep": 15.0, "real_text ran": 2, "real_text sweeps": 2,
                       "adversarial": 8.0, "adversarial per sweep": 4.0, "adversarial ran": 2,
                       "adversarial sweeps": 4, "total": 46.0}
    with pytest.raises(ValueError, match="no adversarial sweep ran"):
        benchmark.paper_profile_seconds(dataclasses.replace(record, runs=runs[:2] + runs[4:]))


def test_run_finds_the_run_of_a_length_and_map() -> None:
    """``record.run(n, kind)`` is the one run at that length of that map (``"self"`` by default); none is a
    LookupError."""
    kinds, recorded = benchmark.benchmark_record("lipschitz-cpu-kinds"), benchmark.benchmark_record("lipschitz-cpu")
    assert isinstance(kinds, LipschitzRecord) and isinstance(recorded, LipschitzRecord)
    for row in kinds.runs:
        assert kinds.run(row.n, row.kind) is row
    assert [recorded.run(row.n) for row in recorded.runs] == list(recorded.runs)
    with pytest.raises(LookupError, match="n = 32 and kind 'self'"):
        kinds.run(32)


def test_default_call_is_the_call_with_the_defaults() -> None:
    """``default_call(run)``: the entry ``"default"`` where a run has one (``bench/workloads.py``), else the
    first method that is not the paper's loop (``bench/lipschitz.py``: ``"lipnb"``)."""
    work = benchmark.benchmark_record("lipschitz-cpu-workloads")
    recorded = benchmark.benchmark_record("lipschitz-cpu")
    assert isinstance(work, WorkloadRecord) and isinstance(recorded, LipschitzRecord)
    assert {benchmark.default_call(row) for row in work.runs} == {"default"}
    assert {benchmark.default_call(row) for row in recorded.runs} == {"lipnb"}
    row = work.runs[0]
    without = dataclasses.replace(row, methods={m: v for m, v in row.methods.items() if m != "default"})
    assert benchmark.default_call(without) == next(m for m in without.methods if not m.startswith("paper"))


def test_records_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LIPNB_BENCH_DIR`` names another folder: records are read from it, missing ones are ``None``."""
    shipped = benchmark.benchmark_record("lipschitz-cpu-gpt2")
    monkeypatch.setenv(benchmark._ENV_VAR, str(tmp_path))
    assert benchmark._records_dir() == tmp_path and benchmark.benchmark_record("lipschitz-cpu") is None
    assert shipped is not None
    benchmark.record_path("mine").write_text(json.dumps(dataclasses.asdict(shipped)))
    assert benchmark.benchmark_record("mine") == shipped
    assert benchmark.relative_errors([1.1, 0.9], [1.0, 1.0]) == pytest.approx([0.1, 0.1])


def test_a_workload_is_named_in_words() -> None:
    """A workload of the record is named by its model, layer, windows, length and threads, in words."""
    work = benchmark.benchmark_record("lipschitz-cpu-workloads")
    assert isinstance(work, WorkloadRecord)
    row = next(r for r in work.runs if r.model == "minilm" and r.threads == 1)
    name = f"MiniLM layer {row.layer} with {row.batch} windows of *Alice* of *n* = {row.n} tokens (one thread)"
    assert benchmark.workload_name(row) == name
    two = dataclasses.replace(row, threads=2)
    assert benchmark.workload_name(two, short=True) == f"MiniLM layer {row.layer}, two threads"
    assert benchmark.workload_parts(two) == (f"MiniLM's layer {row.layer}", "two threads")


def test_workload_record_ships_and_tabulates() -> None:
    """``bench/workloads.py``'s record (both workloads, one run) ships with lipnb and tabulates one line per
    (workload, call); its speedups are the paper's medians over each call's, and each call's time split
    adds up to its total."""
    record = benchmark.benchmark_record("lipschitz-cpu-workloads")
    assert isinstance(record, WorkloadRecord)
    assert {row.workload for row in record.runs} >= {"chapter-10", "issue-23"}
    table = benchmark._workload_table(record)
    assert len(table.rows) == sum(len(row.methods) for row in record.runs)
    for row in record.runs:
        paper = row.methods["paper"]
        oracle = row.methods["paper-oracle"]
        calls = benchmark.lipnb_calls(row)
        assert set(calls) == set(record.calls) and set(row.methods) - set(calls) == set(benchmark.PAPER_BASELINES)
        for method, v in calls.items():
            assert row.speedup[method].cpu == pytest.approx(paper.cpu.median / v.cpu.median)
            assert row.speedup_oracle[method].wall == pytest.approx(oracle.wall.median / v.wall.median)
            split = v.split
            assert split is not None
            parts = split.linearize_cpu_s + split.products_cpu_s + split.solver_cpu_s
            assert parts == pytest.approx(split.cpu_s)


def test_peer_comparisons_read_the_record_and_refuse_one_without_peers() -> None:
    """The default call against SciPy's solvers, per workload: the speedups are the medians' ratios and agree
    with the ones the record states; a record whose workloads timed no peers is refused by name."""
    record = benchmark.benchmark_record("lipschitz-cpu-workloads")
    assert isinstance(record, WorkloadRecord)
    comparisons = benchmark.peer_comparisons(record)
    assert len(comparisons) == len(record.runs)
    for run, c in zip(record.runs, comparisons, strict=True):
        for name in benchmark.PEER_TITLES:
            assert c.speedup[name] == pytest.approx(run.peers[name].cpu.median / c.default_cpu)
            assert c.speedup[name] == pytest.approx(c.recorded_speedup[name], rel=1e-9)
            assert 0 <= c.unconverged[name] <= run.batch
    bare = dataclasses.replace(record, runs=(dataclasses.replace(record.runs[0], peers=None),))
    with pytest.raises(ValueError, match=r"retake it with bench/workloads\.py"):
        benchmark.peer_comparisons(bare)
    with pytest.raises(TypeError, match="WorkloadRecord"):
        benchmark.peer_comparisons(benchmark.benchmark_record("lipschitz-cpu"))  # type: ignore[arg-type]


def test_a_relative_error_is_written_as_a_percentage_and_noise_as_below_a_hundredth() -> None:
    """Two significant digits of the percentage; below 0.01% the digits are rounding noise, said in words."""
    assert benchmark.error_percent(0.0037) == "0.37%"
    assert benchmark.error_percent(0.25) == "25%"
    assert benchmark.error_percent(1e-6) == "below 0.01%"
    assert benchmark.error_percent(0) == "below 0.01%"
    with pytest.raises(ValueError, match="at least 0"):
        benchmark.error_percent(-0.1)
    with pytest.raises(ValueError, match="at least 0"):
        benchmark.error_percent(float("nan"))
    with pytest.raises(TypeError, match="real number"):
        benchmark.error_percent("0.1")
