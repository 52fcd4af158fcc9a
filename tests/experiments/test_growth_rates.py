"""The rates table of chapter 34 on a small grid: the exponents the two papers state."""

from __future__ import annotations

import pytest

from lipnb.experiments.growth_rates import rates_table

# Every test reads one rates table, 76 s to compute on one thread (measured with the whole suite).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch):
    monkeypatch_module.setenv("LIPNB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    return rates_table(radii=(8.0, 16.0, 32.0), lengths=(2, 4, 8)).frame.set_index("result")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_null_set_grows_like_r_squared(table) -> None:
    assert abs(table.loc["Theorem 3.1 / App. C.7 (null set)", "measured_exponent"] - 2) < 0.05


def test_generic_input_does_not_grow(table) -> None:
    assert table.loc["Theorem 3.7 (off the null set)", "measured_exponent"] < 0.05


def test_l2_rows_are_present(table) -> None:
    assert {"Theorem 3.2 (inf-norm)", "Theorem 3.2 (2-norm)"} <= set(table.index)
