"""lipnb.report: stated numbers, checks that print their margin and fail, named figures."""

from __future__ import annotations

import pytest

from lipnb import report


def test_check_prints_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    report.check("1 < 2", True, margin=1.0)
    assert capsys.readouterr().out.strip() == "holds: 1 < 2 (margin 1)"
    with pytest.raises(AssertionError, match="check failed: 2 < 1"):
        report.check("2 < 1", False, margin=-1.0)


def test_state_formats_and_refuses_nonsense() -> None:
    assert report.state("ratio", 0.123456) == "0.123"
    assert report.state("count", 12, "d") == "12"
    with pytest.raises(ValueError, match="non-finite"):
        report.state("bad", float("nan"))
    with pytest.raises(ValueError, match="glue name"):
        report.state("a b", 1.0)


def test_figure_has_the_question_as_title() -> None:
    fig, axes = report.figure("Does it grow?", ncols=2)
    assert fig._suptitle.get_text() == "Does it grow?" and len(axes) == 2
    assert report.show("fig-demo", fig) is fig
