"""lipnb.report: stated numbers, checks stated once (verdict and margin from one comparison), the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lipnb import report
from lipnb.report import check


def test_below_prints_its_margin_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.below("1.5 is at most 2", 1.5, 2.0) == pytest.approx(0.25)
    assert capsys.readouterr().out.strip() == "holds: 1.5 is at most 2 | 1.5 ≤ 2 | margin 0.25"
    with pytest.raises(AssertionError, match="check failed: FAILS: 3 is at most 2"):
        check.below("3 is at most 2", 3.0, 2.0)


def test_verdict_and_margin_agree_on_arrays() -> None:
    # the tightest element decides both the verdict and the margin
    assert check.below("all below", np.array([1.0, 1.9]), 2.0) == pytest.approx(0.05)
    assert check.below("comfortably below", 0.2, 2.0) == 0.5
    assert check.above("all above", torch.tensor([3.0, 2.5]), 2.0) == pytest.approx(0.25)
    assert check.between("in the band", [0.2, 0.5], 0.0, 1.0) == pytest.approx(0.2)
    with pytest.raises(AssertionError):
        check.between("in the band", [0.2, 1.5], 0.0, 1.0)
    with pytest.raises(AssertionError):
        check.below("strictly", 2.0, 2.0, strict=True)


def test_close_uses_the_stated_tolerance() -> None:
    assert check.close("equal to 1e-9", 1.0 + 7e-10, 1.0, rtol=1e-9) == pytest.approx(0.3, abs=1e-3)
    with pytest.raises(AssertionError):
        check.close("equal to 1e-9", 1.0 + 1e-6, 1.0, rtol=1e-9)
    with pytest.raises(ValueError, match="rtol"):
        check.close("no tolerance", 1.0, 1.0)


def test_equal_and_bad_input() -> None:
    assert check.equal("three clusters", 3, 3) == 1.0
    with pytest.raises(AssertionError):
        check.equal("three clusters", 2, 3)
    with pytest.raises(ValueError, match="NaN"):
        check.below("nan", float("nan"), 1.0)
    with pytest.raises(ValueError, match="claim"):
        check.below("", 1.0, 2.0)


def test_ledger_reads_the_check_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check.below("a tight claim", 3.0, 4.0)
    text = capsys.readouterr().out
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                        "text": ["noise\n", text]}]}]}
    path = tmp_path / "07_demo.ipynb"
    path.write_text(json.dumps(nb))
    (entry,) = report.read_ledger([path])
    assert entry.chapter == "07_demo" and entry.margin == pytest.approx(0.25) and "3 ≤ 4" in entry.detail


def test_state_formats_and_refuses_nonsense() -> None:
    assert report.state("ratio", 0.123456) == "0.123"
    assert report.state("count", 12, "d") == "12"
    assert report.state("tensor", torch.tensor(2.5), ".2f") == "2.50"
    with pytest.raises(ValueError, match="non-finite"):
        report.state("bad", float("nan"))
    with pytest.raises(ValueError, match="glue name"):
        report.state("a b", 1.0)
    with pytest.raises(TypeError):
        report.state("list", [1.0])


def test_figure_has_the_question_as_title() -> None:
    fig, axes = report.figure("Does it grow?", ncols=2)
    assert fig._suptitle.get_text() == "Does it grow?" and len(axes) == 2
    assert report.show("fig-demo", fig) is fig


def test_markdown_table_formats_numbers_and_escapes_pipes() -> None:
    table = report.markdown_table([{"claim": "a | b", "alpha": 0.123456, "n": 3},
                                   {"claim": "{ref}`ch-x`", "alpha": 2.0, "n": 12}], {"n": "d"})
    assert table.data.splitlines() == ["| claim | alpha | n |", "|---|---|---|", "| a \\| b | 0.123 | 3 |",
                                       "| {ref}`ch-x` | 2 | 12 |"]
    norm = report.markdown_table([{"correction": r"exponent $\|A\|_2R^2$"}])
    assert norm.data.splitlines()[-1] == r"| exponent $\Vert A\Vert _2R^2$ |"
    with pytest.raises(ValueError, match="same columns"):
        report.markdown_table([{"a": 1}, {"b": 2}])


def test_a_check_far_inside_prints_no_rounding_noise(capsys: pytest.CaptureFixture[str]) -> None:
    """Errors of 1.4e-14 and 1.6e-14 against 1e-12 print the same line: the digits of noise are not shown."""
    lines = []
    for noise in (1.36e-16, 1.639e-16):
        assert check.below("error at rounding level", noise * 100, 1e-12) == 0.5
        assert check.close("identity", [1.0 + noise, 2.0], [1.0, 2.0 + noise], rtol=1e-14) == 0.5
        lines.append(capsys.readouterr().out)
    assert lines[0] == lines[1] and "1.36" not in lines[0]
    assert check.below("tight", 0.7, 1.0) == pytest.approx(0.3)
    assert "0.7 ≤ 1" in capsys.readouterr().out
