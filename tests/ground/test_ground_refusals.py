"""The ground floor refuses what it cannot honour before any work: a Profile whose settings are not numbers, grids
or flags, an unknown ``$LIPNB_PROFILE`` (cached sweep or not), a cache entry whose file a folder has taken; and the
cache round trip keeps every column's dtype (a float column of whole numbers stays float)."""

from __future__ import annotations

import dataclasses
import math
import tempfile

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb import profiles, results
from lipnb.results import ResultTable, cached_table

QUICK = profiles.PROFILES["quick"]
GRIDS = ("lengths", "alice_lengths", "ag_news_lengths", "jump_lengths", "adversarial_lengths",
         "smollm2_long_lengths")
bad_grids = st.one_of(st.just("8 16"), st.just([]), st.just([8, 8]), st.just([0, 8]), st.just([8.0, 16]),
                      st.just(8), st.just([True]), st.just(None))
bad_counts = st.one_of(st.just("3"), st.just(0), st.just(-1), st.just(2.5), st.just(True), st.just(None))


@given(st.sampled_from(GRIDS), bad_grids)
def test_a_profile_grid_that_is_not_distinct_positive_ints_is_refused(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        dataclasses.replace(QUICK, **{field: value})


@given(st.sampled_from(["per_length", "text_per_length"]), bad_counts)
def test_a_profile_count_that_is_not_a_positive_int_is_refused(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        dataclasses.replace(QUICK, **{field: value})


@pytest.mark.parametrize(("field", "value"), [
    ("every_adversarial_layer", "no"), ("every_adversarial_layer", 0), ("seeds", [0, -1]), ("seeds", [2**64]),
    ("seeds", "012"), ("smollm2_layers", [0, -1]), ("smollm2_layers", "0"), ("smollm2_pair", [16]),
    ("smollm2_pair", [16, 128, 512]), ("encoder", 3), ("name", "")])
def test_other_profile_settings_are_checked(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        dataclasses.replace(QUICK, **{field: value})


@given(st.lists(st.integers(1, 10**4), min_size=1, max_size=5, unique=True))
def test_a_profile_stores_its_grids_as_tuples_of_ints(lengths: list[int]) -> None:
    p = dataclasses.replace(QUICK, lengths=lengths, seeds=range(3), smollm2_layers=[1, 2])
    assert p.lengths == tuple(lengths) and p.seeds == (0, 1, 2) and p.smollm2_layers == (1, 2)
    assert dataclasses.replace(QUICK, smollm2_layers=None).smollm2_layers is None


@given(st.text(st.characters(exclude_characters="\x00"), min_size=1, max_size=8)
       .filter(lambda name: name not in profiles.PROFILES))
def test_an_unknown_profile_is_refused_by_every_sweep_cached_or_not(name: str) -> None:
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as cache:
        patch.setattr(profiles, "_selected", None)
        patch.delenv(profiles._ENV_VAR, raising=False)
        patch.setenv(results._CACHE_ENV, cache)
        cached_table("warm", {}, lambda: {"x": [1.0]})                     # a warm entry
        patch.setenv(profiles._ENV_VAR, name)
        for sweep in ("warm", "cold"):
            with pytest.raises(ValueError, match="LIPNB_PROFILE"):
                cached_table(sweep, {}, lambda: {"x": [1.0]})


def test_an_entry_taken_by_a_folder_is_refused_before_the_sweep_runs(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    cached_table("t", {}, lambda: {"x": [1.0]})
    for suffix in (".csv", ".json"):
        entry = next(tmp_path.glob(f"t-*{suffix}"))
        entry.unlink()
        entry.mkdir()

        def compute() -> dict:
            raise AssertionError("the sweep ran")

        with pytest.raises(ValueError, match="is a folder"):
            cached_table("t", {}, compute)
        entry.rmdir()


@pytest.mark.parametrize("column", [5, 2.5, None, torch.tensor(1.0), "abc"])
def test_a_column_that_is_not_a_sequence_is_refused(column: object) -> None:
    with pytest.raises((TypeError, ValueError), match="column 'x'"):
        ResultTable.from_columns({"x": column}, {})


def test_reading_a_table_that_is_not_there_names_the_file(tmp_path) -> None:
    for path in (tmp_path / "none.csv", str(tmp_path / "none.csv"), tmp_path):
        with pytest.raises(ValueError, match=r"missing|a folder"):
            ResultTable.read_csv(path)
    ResultTable.from_columns({"x": [1.0]}, {}).to_csv(tmp_path / "t.csv")
    (tmp_path / "t.csv").unlink()
    with pytest.raises(ValueError, match=r"t\.csv is missing"):
        ResultTable.read_csv(tmp_path / "t.csv")


columns = st.one_of(
    st.lists(st.integers(-10**6, 10**6).map(float), min_size=1, max_size=5),           # whole floats
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=5),
    st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=5),
    st.lists(st.booleans(), min_size=1, max_size=5),
    st.lists(st.text(alphabet="aN1 ,.\"", max_size=3), min_size=1, max_size=5))


@given(columns)
def test_the_round_trip_keeps_every_columns_dtype(values: list) -> None:
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as cache:
        patch.setenv(results._CACHE_ENV, cache)
        table = ResultTable.from_columns({"x": values}, {})
        back = cached_table("dtypes", {"values": repr(values)}, lambda: {"x": values})
    assert back.frame["x"].dtype == table.frame["x"].dtype or pd.api.types.is_string_dtype(back.frame["x"])
    expected = table.frame["x"].tolist()
    assert all(a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
               for a, b in zip(back.frame["x"].tolist(), expected, strict=True))
