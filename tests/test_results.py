"""lipnb.results: the typed results table, its CSV round trip and the cache key."""

from __future__ import annotations

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
    monkeypatch.setenv(results.CACHE_ENV, str(tmp_path))
    calls = []

    def compute() -> dict:
        calls.append(1)
        return {"x": [float(len(calls))]}

    first = cached_table("demo", {"a": 1}, compute)
    assert cached_table("demo", {"a": 1}, compute)["x"].tolist() == first["x"].tolist() == [1.0]
    assert cached_table("demo", {"a": 2}, compute)["x"].tolist() == [2.0]
    monkeypatch.setattr(results, "code_version", lambda: "edited")
    assert cached_table("demo", {"a": 1}, compute)["x"].tolist() == [3.0]
    assert len(calls) == 3 and not list(tmp_path.glob("*.pt"))


def test_cache_dir_is_never_inside_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv(results.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert results.cache_dir() == tmp_path / "lipnb" / "results"
