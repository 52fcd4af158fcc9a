"""lipnb.results: the typed results table, its CSV round trip and the cache key."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from lipnb import results
from lipnb.results import ResultTable, cached_table


def _columns() -> dict:
    return {"n": torch.tensor([2, 4, 8]), "lip": torch.tensor([1 / 3, 2**0.5, torch.pi], dtype=torch.float64),
            "inputs": ["random", "adversarial", "random"]}


def test_csv_round_trip_is_exact(tmp_path) -> None:
    table = ResultTable.from_columns(_columns(), {"sweep": "t"})
    table.to_csv(tmp_path / "t.csv")
    back = ResultTable.read_csv(tmp_path / "t.csv")
    assert back["lip"].equal(table["lip"]) and back["n"].tolist() == [2.0, 4.0, 8.0]
    assert back.provenance == {"sweep": "t"} and back.columns == ["n", "lip", "inputs"]


def test_missing_values_stay_numbers(tmp_path) -> None:
    table = ResultTable.from_columns({"x": [1.0, float("nan"), float("inf")]}, {})
    table.to_csv(tmp_path / "t.csv")
    back = ResultTable.read_csv(tmp_path / "t.csv")["x"]
    assert back[0] == 1.0 and back[1].isnan() and back[2].isinf()


def test_labels_come_back_as_written(tmp_path) -> None:
    # Labels a CSV reader takes for gaps or numbers ("", "NA", "None", "1") stay strings; numbers stay numbers.
    columns = {"raised": ["", ""], "kind": ["NA", "None"], "code": ["1", "007"], "mixed": ["", "x"],
               "x": [float("nan"), 2.5], "flag": [True, False]}
    table = ResultTable.from_columns(columns, {})
    table.to_csv(tmp_path / "t.csv")
    back = ResultTable.read_csv(tmp_path / "t.csv").frame
    for name in ("raised", "kind", "code", "mixed"):
        assert back[name].tolist() == columns[name] and pd.api.types.is_string_dtype(back[name]), name
    assert back["x"].dtype == "float64" and back["x"].isna().tolist() == [True, False]
    assert back["flag"].dtype == bool and back["flag"].tolist() == [True, False]


def test_a_sweep_returns_the_table_its_cache_holds(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Computed or read, the same frame: dtypes included (a float32 tensor, a column of None and booleans).
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))

    def compute() -> dict:
        return {"x": torch.tensor([0.1, 0.2], dtype=torch.float32), "ok": [True, None], "raised": ["", ""]}

    cold, warm = cached_table("t", {}, compute), cached_table("t", {}, compute)
    pd.testing.assert_frame_equal(cold.frame, warm.frame, check_exact=True)
    assert cold.frame["raised"].tolist() == ["", ""] and cold.frame["x"].dtype == "float64"


def test_where_and_pivot() -> None:
    table = ResultTable.from_columns(_columns(), {})
    assert table.where(inputs="random")["n"].tolist() == [2.0, 8.0]
    grid = ResultTable.from_columns({"layer": [0, 0, 1, 1], "head": [1, 0, 0, 1], "g": [2.0, 1.0, 3.0, 4.0]}, {})
    assert grid.pivot("g", "layer", "head").tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_bad_tables_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        ResultTable.from_columns({"a": [1, 2], "b": [1]}, {})
    with pytest.raises(ValueError, match="1-D"):
        ResultTable.from_columns({"a": torch.zeros(2, 2)}, {})
    table = ResultTable.from_columns(_columns(), {})
    with pytest.raises(KeyError, match="no column 'x'"):
        table["x"]
    with pytest.raises(TypeError, match="labels"):
        table["inputs"]


def test_cache_hits_only_under_the_same_key(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"x": [float(len(calls))]}

    first = cached_table("demo", {"a": 1}, compute)
    assert cached_table("demo", {"a": 1}, compute)["x"].tolist() == first["x"].tolist() == [1.0]
    assert cached_table("demo", {"a": 2}, compute)["x"].tolist() == [2.0]
    monkeypatch.setattr(results, "code_version", lambda module=None: "edited")
    assert cached_table("demo", {"a": 1}, compute)["x"].tolist() == [3.0]
    assert len(calls) == 3 and not list(tmp_path.glob("*.pt"))


def test_cache_dir_is_never_inside_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(results._CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert results.cache_dir() == tmp_path / "lipnb" / "results"


def _big_columns(rows: int = 20_000) -> dict:
    x = torch.linspace(0, 1, rows, dtype=torch.float64)
    return {"i": torch.arange(rows), "x": x.sin() / 3, "label": ["a", "b"] * (rows // 2)}


@pytest.fixture
def big_entry(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A 20,000-row table in an empty cache; returns (path of its CSV, the computed table, a compute counter)."""
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    calls = []

    def compute() -> dict:
        calls.append(1)
        return _big_columns()

    table = cached_table("big", {"rows": 20_000}, compute)
    (path,) = tmp_path.glob("big-*.csv")
    return path, table, compute, calls


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _garbage(path) -> None:
    path.write_bytes(b"\x00\x01 not a table,\n")


def _drop_a_row(path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:100] + lines[101:]))


def _half_json(path) -> None:
    meta = path.with_suffix(".json")
    meta.write_text(meta.read_text()[:40])


def _no_json(path) -> None:
    path.with_suffix(".json").unlink()


@pytest.mark.parametrize("damage", [_truncate, _garbage, _drop_a_row, _half_json, _no_json])
def test_a_damaged_entry_is_recomputed_with_a_warning(big_entry, damage) -> None:
    path, table, compute, calls = big_entry
    damage(path)
    with pytest.warns(RuntimeWarning, match="damaged"):
        again = cached_table("big", {"rows": 20_000}, compute)
    assert len(calls) == 2 and len(again) == 20_000
    assert again["x"].equal(table["x"]) and again.frame.label.tolist() == table.frame.label.tolist()
    assert cached_table("big", {"rows": 20_000}, compute)["x"].equal(table["x"]) and len(calls) == 2


def test_read_csv_names_the_defect(big_entry) -> None:
    path, *_ = big_entry
    _drop_a_row(path)
    with pytest.raises(ValueError, match="checksum"):
        ResultTable.read_csv(path)


_WORKER = """
import hashlib, sys
import torch
from lipnb.results import cached_table
rows = 20_000
x = torch.linspace(0, 1, rows, dtype=torch.float64)
columns = {"i": torch.arange(rows), "x": x.sin() / 3, "label": ["a", "b"] * (rows // 2)}
table = cached_table("shared", {"rows": rows}, lambda: columns)
print(hashlib.sha256(table.frame.to_csv(index=False, float_format="%.17g").encode()).hexdigest())
"""


@pytest.mark.slow
def test_concurrent_writers_of_one_key_all_get_the_table(tmp_path) -> None:
    """What ``pytest -n 2`` does when chapters share a sweep on a cold cache: no crash, every table right."""
    import hashlib
    import os
    import subprocess
    import sys

    expected = ResultTable.from_columns(_big_columns(), {}).frame.to_csv(index=False, float_format="%.17g")
    expected = hashlib.sha256(expected.encode()).hexdigest()
    for attempt in range(3):
        cache = tmp_path / f"run{attempt}"
        env = {**os.environ, results._CACHE_ENV: str(cache), "OMP_NUM_THREADS": "1"}
        workers = [subprocess.Popen([sys.executable, "-c", _WORKER], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outputs = [w.communicate(timeout=120) for w in workers]
        assert [w.returncode for w in workers] == [0] * 4, [err[-500:] for _, err in outputs]
        assert [out.strip() for out, _ in outputs] == [expected] * 4
        assert len(ResultTable.read_csv(next(cache.glob("shared-*.csv")))) == 20_000
        assert not list(cache.glob(".*tmp"))


_COUNTING_WORKER = """
import os, sys, time
from lipnb.results import cached_table

def compute():
    with open(sys.argv[1], "a") as log:  # one line per computation, whichever process runs it
        log.write(f"{os.getpid()}\\n")
    time.sleep(1.0)  # long enough for the other processes to find the entry missing
    return {"x": [1.0, 2.0]}

print(cached_table("once", {"k": 1}, compute)["x"].tolist())
"""


@pytest.mark.slow
def test_processes_that_need_one_missing_entry_compute_it_once(tmp_path) -> None:
    """Two chapters that need the same sweep at once on a cold cache (``pytest -n 2``) share one computation: the
    first holds the entry's lock and computes, the others wait and read what it stored."""
    import os
    import subprocess
    import sys

    log = tmp_path / "computed.log"
    env = {**os.environ, results._CACHE_ENV: str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen([sys.executable, "-c", _COUNTING_WORKER, str(log)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert [w.returncode for w in workers] == [0] * 3, [err[-500:] for _, err in outputs]
    assert [out.strip() for out, _ in outputs] == ["[1.0, 2.0]"] * 3
    assert len(log.read_text().splitlines()) == 1, "the entry was computed more than once"
