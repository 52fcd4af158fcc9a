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


def test_read_states_reads_what_state_glued(tmp_path: Path) -> None:
    record = {"output_type": "display_data", "data": {"application/papermill.record/text/plain": "'0.92'"},
              "metadata": {"scrapbook": {"mime_prefix": "application/papermill.record/", "name": "drawn-C"}}}
    stream = {"output_type": "stream", "name": "stdout", "text": "holds: x | y | margin 1\n"}
    path = tmp_path / "chapter.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [stream, record]},
                                          {"cell_type": "markdown"}]}))
    assert report.read_states(path) == {"drawn-C": "0.92"}


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


def _clean_figure():
    fig, ax = report.figure("A clean figure")
    ax.plot([1, 2, 3], [1, 4, 9], "o-", label="squares")
    ax.legend()
    return fig, ax


def test_show_accepts_a_clean_figure() -> None:
    fig, _ = _clean_figure()
    assert report.figure_defects(fig) == []
    assert report.show("fig-clean", fig) is fig


def test_show_refuses_overprinted_tick_labels() -> None:
    """Minor log labels over a narrow range (Fig. 11.2's radius axis before the fix) overprint each other."""
    fig, ax = report.figure("Narrow log axis", width=3)
    ax.scatter(np.linspace(11.1, 12.4, 10), np.arange(10))
    ax.set_xscale("log")
    with pytest.raises(ValueError, match=r"x tick labels .* overlap"):
        report.show("fig-ticks", fig)
    fig, ax = report.figure("Crowded categories", width=2)
    ax.bar([f"a long category name {i}" for i in range(6)], range(6))
    assert any("x tick labels" in d for d in report.figure_defects(fig))


def test_show_refuses_an_offset_text_on_a_title() -> None:
    """A colorbar over radii 27.7095..27.7102 prints "+2.771e1" on the panel's title (Fig. 11.1 before the fix)."""
    fig, axes = report.figure("Offset on a title", ncols=2, width=4.2)
    for ax in axes:
        points = ax.scatter([1, 2, 3], [1, 2, 3], c=[27.7095, 27.71, 27.7102])
        ax.set_title("gpt2-random, layer 6, a long title", fontsize=9)
        fig.colorbar(points, ax=ax, label="radius")
    fig.tight_layout()
    defects = report.figure_defects(fig)
    assert any("offset '+2.771e1' sits on the text 'gpt2-random" in d for d in defects), defects
    for cbar_axes in fig.axes[2:]:
        cbar_axes.yaxis.get_major_formatter().set_useOffset(False)
    assert report.figure_defects(fig) == []


def test_show_refuses_a_legend_entry_with_nothing_drawn() -> None:
    """24 exponents equal to 1e-7 get 20 bins 5e-9 wide: bars of no width (Fig. 12.1 before the fix)."""
    fig, ax = report.figure("Invisible bars")
    ax.hist(np.linspace(-0.2, 0.6, 40), bins=20, label="visible")
    ax.hist(0.5 + np.linspace(0, 1e-7, 24), bins=20, label="invisible")
    ax.legend()
    assert report.figure_defects(fig) == ["legend entry 'invisible' has nothing drawn inside its axes"]
    fig, ax = report.figure("A line outside the limits")
    ax.plot([1, 2], [1, 2], label="inside")
    ax.plot([10, 20], [10, 20], label="outside")
    ax.set_xlim(0, 3)
    ax.set_ylim(0, 3)
    ax.legend()
    with pytest.raises(ValueError, match="legend entry 'outside' has nothing drawn"):
        report.show("fig-legend", fig)
    fig, ax = report.figure("Common bins")
    values = [np.linspace(-0.2, 0.6, 40), 0.5 + np.linspace(0, 1e-7, 24)]
    ax.hist(values, bins=np.histogram_bin_edges(np.concatenate(values), bins=20), label=["spread", "at 1/2"])
    ax.axvline(0.5, color="k", label="1/2")
    ax.legend()
    assert report.figure_defects(fig) == []
