"""The long-context record's helpers: closed forms for the attention-row measures and the rounding grid, the
record's shape, and refusals before any work."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb.experiments import long_context as lc


def test_attention_rows_match_closed_forms() -> None:
    n = 4
    uniform = torch.full((1, 1, n, n), 1 / n)
    one_hot = torch.eye(n).view(1, 1, n, n)
    rows = lc._attention_rows(torch.cat([uniform, one_hot], 1))
    assert rows["row_max"][0].tolist() == pytest.approx([1 / n, 1.0])
    assert rows["entropy"][0].tolist() == pytest.approx([math.log(n), 0.0], abs=1e-12)
    assert rows["spread"][0].tolist() == pytest.approx([n, 1.0])


def test_rounding_steps_recover_the_q4_1_grid() -> None:
    generator = torch.Generator().manual_seed(0)
    low = torch.randn(3, 2, 1, generator=generator)
    step = torch.rand(3, 2, 1, generator=generator) + 0.1
    codes = torch.randint(0, 16, (3, 2, lc.BLOCK), generator=generator)
    codes[..., 0], codes[..., 1] = 0, 15                   # every block uses both ends of its grid
    weight = (low + step * codes).reshape(3, 2 * lc.BLOCK)
    expected = step.expand(3, 2, lc.BLOCK).reshape(3, -1)
    torch.testing.assert_close(lc._rounding_steps(weight), expected)


def test_the_record_holds_the_grid_and_converged_values() -> None:
    table = lc.long_context_layers()
    assert set(table.text) == {"alice", "ag_news"}
    for n, chosen in lc._GRID.items():
        layers = set(table[table.n == n].layer)
        assert layers == (set(range(30)) if chosen == "all" else set(chosen))
    assert bool(table.converged.all())
    assert set(lc.long_context_heads().n) == {n for n in lc.LENGTHS if n < lc._DEEPEST}


def test_bad_requests_are_refused_before_any_work() -> None:
    with pytest.raises(ValueError, match="n must be one of"):
        lc._measure_text("alice", 300)
    with pytest.raises(ValueError, match="no rows"):
        lc.replay_long_context("alice", 1024, 3)
    with pytest.raises(ValueError, match="name"):
        lc._record_path("smollm2-short")
    with pytest.raises(ValueError, match="n"):
        lc._measure_text("alice", 1, layers=[0])


def test_the_gpu_record_holds_every_layer_at_every_length() -> None:
    record = lc.long_context_record(lc.GPU_RECORD)
    table = lc.long_context_layers(record)
    lengths = record["grid"]["lengths"]
    assert sorted(set(table.n)) == lengths
    cells = table.groupby(["text", "n"]).agg(layers=("layer", "nunique"), windows=("window", "nunique"))
    assert bool((cells.layers == 30).all() & (cells.windows == record["windows"]).all())
    assert len(table) == 2 * len(lengths) * 30 * record["windows"]
    assert bool(table.converged.all())
    heads = lc.long_context_heads(record)
    assert set(heads.n) == set(lengths) and set(heads.layer) == {lc.FOCUS}


def test_agreement_pairs_the_same_inputs() -> None:
    row = {"text": "alice", "n": 512, "window": 0, "layer": 3, "lip": 2.0, "error": 1e-4}
    first = {"rows": [row, {**row, "window": 1}]}
    second = {"rows": [{**row, "lip": 2.002, "error": 2e-4}, {**row, "n": 1024}]}
    joined = lc.agreement(first, second)
    assert len(joined) == 1
    assert joined.gap.iloc[0] == pytest.approx(abs(2.0 / 2.002 - 1))
    assert (joined.error_a.iloc[0], joined.error_b.iloc[0]) == (1e-4, 2e-4)
