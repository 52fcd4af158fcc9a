"""lipnb.report: stated numbers, checks stated once (verdict and margin from one comparison), the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from lipnb import report
from lipnb.report import check, figures


@pytest.fixture(autouse=True)
def empty_ledger() -> None:
    """Each test starts with an empty ledger (checks of another test are not its own)."""
    report.checks._LEDGER.clear()


def test_below_records_its_margin_prints_nothing_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.below("1.5 is at most 2", 1.5, 2.0) == pytest.approx(0.25)
    assert capsys.readouterr().out == ""
    (entry,) = report.checks._LEDGER
    assert (entry.claim, entry.detail, entry.value, entry.op, entry.threshold) == ("1.5 is at most 2", "1.5 ≤ 2",
                                                                                   1.5, "≤", 2.0)
    assert entry.line() == "holds: 1.5 is at most 2 | 1.5 ≤ 2 | margin 0.25"
    with pytest.raises(AssertionError, match="check failed: FAILS: 3 is at most 2"):
        check.below("3 is at most 2", 3.0, 2.0)
    assert len(report.checks._LEDGER) == 1, "a failed check is an error, not a ledger entry"


def test_an_equality_reads_as_an_equality() -> None:
    """A value at its bound shows the digits that tell them apart; close and equal read "=", never "1 > 1"."""
    check.above("one above one", 1.0 + 3e-12, 1.0, strict=True)
    check.below("a value at its bound", 0.2505, 0.2505 * (1 + 1e-12))
    check.close("the closed form", 0.2505002, 0.2505, rtol=1e-6)
    check.close("exact to rounding", 1.0, 1.0, rtol=1e-12)
    check.equal("three clusters", 3, 3)
    check.equal("refused", True, True)
    check.equal("no stragglers", [], [])
    check.equal("the labels", ("a", 0.5), ("a", 0.5))
    check.equal("no coupling", float("inf"), float("inf"))
    details = [e.detail for e in report.checks._LEDGER]
    assert details[0] == "1.000000000003 > 1"
    assert details[1] == "0.2505 ≤ 0.2505000000003"
    assert details[2] == "0.2505 = 0.2505 within a relative 1e-06"
    assert details[3] == "within a relative 1e-12, the error at most half of it"
    assert details[4] == "3, exactly as expected"
    assert details[5:] == ["yes, exactly as expected", "none, exactly as expected", "a, 0.5, exactly as expected",
                           "∞, exactly as expected"]
    assert [e.op for e in report.checks._LEDGER] == [">", "≤", "=", "=", "==", "==", "==", "==", "=="]


def test_whole_numbers_of_four_digits_are_written_in_full() -> None:
    """Counts of a thousand or more read with thousands separators; anything else keeps its significant digits."""
    check.above("the audit covers at least 1,000 inputs", 1024, 1000)
    check.below("a count under a float bound", 999.0, 1000.5)
    check.below("operations", 62914560, 62914561)
    check.equal("operations per product", np.int64(1769472), 1769472)
    check.equal("a whole float", 6144.0, 6144)
    assert [e.detail for e in report.checks._LEDGER] == ["1,024 ≥ 1,000", "999 ≤ 1000", "62,914,560 ≤ 62,914,561",
                                                         "1,769,472, exactly as expected", "6,144, exactly as expected"]
    with pytest.raises(AssertionError, match="1,769,472, not 1,769,473"):
        check.equal("operations per product", 1769472, 1769473)


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
    with pytest.raises(AssertionError, match=r"check failed: FAILS: nan \| value holds NaN"):
        check.below("nan", float("nan"), 1.0)
    with pytest.raises(ValueError, match="claim"):
        check.below("", 1.0, 2.0)


def test_ledger_ignores_printed_check_lines(tmp_path: Path) -> None:
    """The ledger is data: a printed line that looks like a check is not read as one."""
    text = "holds: a tight claim | 3 ≤ 4 | margin 0.25\n"
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout",
                                                        "text": ["noise\n", text]}]}]}
    path = tmp_path / "07_demo.ipynb"
    path.write_text(json.dumps(nb))
    assert report.read_ledger([path]) == []


def _run_ledger(monkeypatch: pytest.MonkeyPatch, **kwargs) -> tuple[dict, dict]:
    """What ledger() displays: the one raw mime bundle it passes to IPython's display, and its metadata."""
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, metadata, raw=False: shown.append((obj, metadata, raw)))
    report.ledger(**kwargs)
    ((bundle, metadata, raw),) = shown
    assert raw and set(bundle) == {"text/plain", "text/html"}
    return bundle, metadata


def test_ledger_counts_checks_met_with_equality_apart_from_the_tightest_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check met with equality (margin below EQUALITY_MARGIN: a tie, or a bound attained to rounding) is not
    reported as the tightest."""
    check.below("attained by construction", 1.0 - 1e-15, 1.0)
    check.below("a tight claim", 0.987654321987, 1.0)
    bundle, _ = _run_ledger(monkeypatch)
    assert bundle["text/plain"].splitlines()[0] == ("What this chapter checked: two checks (one met with "
                                                    "equality, left out of the tightest margin), tightest margin "
                                                    "0.012")
    check.above("attained from below", 3.0, 3.0)
    check.below("attained", 2.0, 2.0)
    bundle, _ = _run_ledger(monkeypatch)
    assert bundle["text/plain"].splitlines()[0] == ("What this chapter checked: two checks, all two met with "
                                                    "equality")
    assert 0 < report.EQUALITY_MARGIN < 1e-6


def test_ledger_shows_one_folded_block_and_stores_full_precision(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="no check ran"):
        report.ledger()
    check.below("a tight claim", 0.987654321987, 1.0)
    check.close("far inside", 1.0, 1.0, rtol=1e-12)
    check.equal("a count", 3, 3)
    extra = ["provenance: seed 0", report.markdown_table([{"a": 1.5}], caption="c")]
    bundle, metadata = _run_ledger(monkeypatch, extra=extra)
    page = bundle["text/html"]
    assert page.startswith('<details class="lipnb-ledger"><summary>What this chapter checked: three checks, '
                           "tightest margin 0.012</summary>")
    assert page.count("<tr>") == 4 + 2 and "<caption>" in page and "<pre>provenance: seed 0</pre>" in page
    assert "<td>1.5</td>" in page
    assert bundle["text/plain"].splitlines()[0] == "What this chapter checked: three checks, tightest margin 0.012"
    assert report.checks._LEDGER == [], "the ledger is emptied once shown"
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "metadata": metadata,
                                                        "data": bundle}]}]}
    path = tmp_path / "09_demo.ipynb"
    path.write_text(json.dumps(nb))
    tight, far, count = report.read_ledger([path])
    assert tight.chapter == "09_demo" and tight.value == 0.987654321987 and tight.margin == pytest.approx(0.012345678)
    assert (far.op, far.margin, far.value, far.threshold) == ("=", 0.5, None, "a relative 1e-12")
    assert (count.op, count.value) == ("==", 3.0)
    with pytest.raises(RuntimeError, match="no check ran"):
        report.ledger()


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


def test_markdown_table_has_a_caption_and_a_dash_for_missing_values() -> None:
    """The book renders ``:::{table} caption`` as an HTML table with a <caption>; None and NaN read "–"."""
    table = report.markdown_table(pd.DataFrame({"model": ["minilm", "gpt2"], "exponent": [0.25, np.nan],
                                                "note": [None, "x"]}),
                                  caption="fitted exponent [95%  bootstrap interval]", name="tab-demo")
    assert table.data.splitlines() == [":::{table} fitted exponent [95% bootstrap interval]", ":name: tab-demo", "",
                                       "| model | exponent | note |", "|---|---|---|", "| minilm | 0.25 | – |",
                                       "| gpt2 | – | x |", ":::"]
    assert table.to_html().startswith("<table><caption>fitted exponent [95%  bootstrap interval]</caption>")
    assert repr(table) == table.data and table._repr_markdown_() == table.data


def test_summary_table_folds_the_full_table() -> None:
    full = [{"n": n, "value": n / 3} for n in range(49)]
    table = report.summary_table(full[:: 16], full, {"n": "d"}, caption="value per length")
    text = table.data
    assert text.startswith(":::{table} value per length\n")
    # The folded copy is titled by its dropdown and has no caption: the book numbers only the table shown.
    assert "::::{dropdown} All 49 rows of the table above\n| n | value |" in text
    assert text.count(":::{table}") == 1 and "(all 49 rows)" not in text
    assert text.endswith("|\n::::") and text.count("| 48 |") == 2 and text.count("| 47 |") == 1


def test_a_check_far_inside_prints_no_rounding_noise() -> None:
    """Errors of 1.4e-14 and 1.6e-14 against 1e-12 read the same: the digits of noise are not shown."""
    lines = []
    for noise in (1.36e-16, 1.639e-16):
        assert check.below("error at rounding level", noise * 100, 1e-12) == 0.5
        assert check.close("identity", [1.0 + noise, 2.0], [1.0, 2.0 + noise], rtol=1e-14) == 0.5
        lines.append([e.line() for e in report.checks._LEDGER])
        report.checks._LEDGER.clear()
    assert lines[0] == lines[1] and "1.36" not in str(lines[0])
    assert check.below("tight", 0.7, 1.0) == pytest.approx(0.3)
    assert report.checks._LEDGER[-1].detail == "0.7 ≤ 1"


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
        ax.set_title("gpt2-random, layer 6, a long title", fontsize=10)
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
    ax.set_ylim(0, 8)  # room above the bars for the legend, which may not cover them
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


def test_figure_defects_finds_a_colour_bar_over_the_next_panel() -> None:
    """SmolLM2's Fig. 13.3 before the fix: a heat map's colour bar whose tick labels overprint the next panel's
    y tick labels, and the two panels' y labels drawn on each other."""
    fig, axes = report.figure("Two heat maps side by side", ncols=2, width=4.5)
    for ax, left in zip(axes, (0.1, 0.6), strict=True):
        image = ax.imshow(np.arange(30.0).reshape(5, 6) * 1e3, aspect="auto")
        ax.set_ylabel("layer")
        ax.set_yticks(range(5), [f"layer {i}" for i in range(5)])
        ax.set_position((left + 0.1, 0.15, 0.28, 0.7))
    fig.colorbar(image, cax=fig.add_axes((0.56, 0.15, 0.02, 0.7)), label="2γR²")
    defects = report.figure_defects(fig)
    tick_on_tick = "axes 1's y tick label 'layer 0' and colour bar 2's y tick label"
    assert any(d.startswith(tick_on_tick) for d in defects), defects
    assert any(d.startswith("axes 1's 'layer' and colour bar 2's") for d in defects), defects
    with pytest.raises(ValueError, match="overprint or touch"):
        report.show("fig-cbar", fig)
    fig, axes = report.figure("The same, laid out", ncols=2, width=4.5)
    for ax in axes:
        image = ax.imshow(np.arange(30.0).reshape(5, 6) * 1e3, aspect="auto")
        ax.set_ylabel("layer")
    fig.colorbar(image, ax=axes, label="2γR²")
    fig.set_layout_engine("constrained")
    assert report.figure_defects(fig) == []


def test_figure_defects_finds_a_legend_over_a_curve() -> None:
    """The large-radius figure before the fix: a legend drawn over the curve where it settles. Its box is tested
    against the line's pixels, not the axes' box: the same legend in an empty corner passes."""
    x = np.linspace(0.0, 1.0, 50)
    fig, ax = report.figure("Where does the constant settle?")
    ax.plot(x, x, label="rising")
    ax.plot(x, 1 - x, "o", label="falling")
    ax.legend(loc="center")
    defects = report.figure_defects(fig)
    assert defects and all(d.startswith("the legend of axes 0 is drawn over the ") for d in defects), defects
    with pytest.raises(ValueError, match="the legend of axes 0 is drawn over the line 'rising'"):
        report.show("fig-legend-over", fig)
    fig, ax = report.figure("Where does the constant settle?")
    ax.plot(x, x**4, label="rising")
    ax.legend(loc="upper left")
    assert report.figure_defects(fig) == []
    fig, ax = report.figure("A heat map under its legend")
    ax.imshow(np.arange(30.0).reshape(5, 6), aspect="auto", label="scores")
    ax.plot([0, 5], [0, 4], label="a path")
    ax.legend(loc="upper right")
    assert any(d.startswith("the legend of axes 0 is drawn over the image") for d in report.figure_defects(fig))


def test_figure_defects_finds_a_colour_bar_over_the_neighbouring_heat_map() -> None:
    """The masked-attention Jacobian blocks before the fix: a colour bar drawn over the right edge of the heat map
    beside it. With the colour bar beside both panels (``ax=axes``, constrained layout) nothing is over the data."""
    fig, axes = report.figure("Jacobian blocks", ncols=2, width=4.5)
    for ax in axes:
        image = ax.imshow(np.arange(30.0).reshape(5, 6), aspect="auto")
        ax.set_yticks([])
    fig.tight_layout()
    box = axes[0].get_position()
    fig.colorbar(image, cax=fig.add_axes((box.x1 - 0.06, box.y0, 0.03, box.height)))
    assert "colour bar 2 is drawn over the image of axes 0" in report.figure_defects(fig)
    fig, axes = report.figure("Jacobian blocks", ncols=2, width=4.5)
    for ax in axes:
        image = ax.imshow(np.arange(30.0).reshape(5, 6), aspect="auto")
    fig.colorbar(image, ax=axes)
    fig.set_layout_engine("constrained")
    assert report.figure_defects(fig) == []


def test_figure_defects_finds_text_over_data_and_text_cut_at_the_edge() -> None:
    """A title or axis label cut at the canvas edge (four figures before the fix), and an annotation written over
    the curve it labels; the same text moved inside the canvas, or beside the curve, passes."""
    x = np.linspace(0.0, 1.0, 50)
    fig, ax = report.figure("Cut titles")
    ax.plot(x, x)
    ax.set_title("a panel title much too long for the canvas it is drawn on, so its end is cut off", loc="left")
    ax.text(0.5, 0.5, "the diagonal")
    defects = report.figure_defects(fig)
    assert any(d.startswith("text 'a panel title much too long") and d.endswith("is cut at the canvas edge")
               for d in defects), defects
    assert "axes 0's text 'the diagonal' is drawn over the line" in defects, defects
    fig, ax = report.figure("Whole titles")
    ax.plot(x, x)
    ax.set_title("a short panel title", loc="left")
    ax.text(0.1, 0.8, "the diagonal")
    assert report.figure_defects(fig) == []
    fig, ax = report.figure("A heat map with its values written on its cells")
    ax.imshow(np.arange(6.0).reshape(2, 3), aspect="auto")
    for (i, j), value in np.ndenumerate(np.arange(6).reshape(2, 3)):
        ax.text(j, i, str(value), ha="center", va="center")
    assert report.figure_defects(fig) == []


def test_small_legend_text_is_a_defect_and_show_enlarges_it() -> None:
    """A 6-pt legend in a figure shrunk to the column reads at 6 px: a defect; show() raises it to 80% of the
    body text, so the stored figure reads."""
    fig, ax = report.figure("A small legend", width=6.5)
    ax.plot([1, 2, 3], [1, 4, 9], "o-", label="squares")
    ax.legend(fontsize=6)
    (defect,) = report.figure_defects(fig)
    assert defect.startswith("text 'squares' is 6 pt: 8.0 px on the page, below 12.8 px"), defect
    assert figures._enlarge_small_text(fig)
    assert ax.get_legend().get_texts()[0].get_fontsize() == pytest.approx(9.6)
    assert report.figure_defects(fig) == []
    wide, _ = report.figure("Never wider than the column", ncols=3, width=4.2)
    assert wide.get_figwidth() == pytest.approx(7.0)


def test_show_glues_a_reproducible_svg(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored figure is vector (SVG), byte for byte the same on every run (no date, fixed ids)."""
    glued = []
    monkeypatch.setattr("myst_nb.glue", lambda name, obj, display: glued.append((name, obj.data)))
    for _ in range(2):
        fig, _ = _clean_figure()
        report.show("fig-svg", fig)
    (name, first), (_, second) = glued
    assert name == "fig-svg" and first.startswith("<svg") and first == second


def test_progress_bars_never_reach_the_cell_output(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep's bar goes to the process's own stderr, and only when it is a terminal or LIPNB_PROGRESS=1:
    inside a notebook kernel (whose sys.stderr is the cell's output) nothing is printed, whatever the setting."""
    import io

    from lipnb.results import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for setting, tty, drawn in (("", False, False), ("", True, True), ("0", True, False), ("1", False, True)):
        process_stderr = Terminal() if tty else io.StringIO()
        monkeypatch.setattr("sys.__stderr__", process_stderr)
        monkeypatch.setenv("LIPNB_PROGRESS", setting) if setting else monkeypatch.delenv("LIPNB_PROGRESS", False)
        assert list(progress(range(3), "sweep")) == [0, 1, 2]
        assert ("sweep" in process_stderr.getvalue()) == drawn, (setting, tty)
        assert capsys.readouterr() == ("", ""), "nothing in the cell's own streams"


def test_two_panel_titles_that_touch_read_as_one() -> None:
    """Fig. 9.2 before the fix: two long panel titles drawn end to end, a space apart, read as one title."""
    fig, axes = report.figure("Touching titles", ncols=3, width=4.2)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
    axes[1].set_title("rescaled $y_i = e^{-tV}x_i$, $V = A = I$, a long title")
    axes[2].set_title("rescaled $y_i$, $V$ pos. def., $A$ symmetric, long")
    fig.tight_layout()
    defects = report.figure_defects(fig)
    assert any(d.startswith("axes 1 ('rescaled") and "and axes 2 ('rescaled" in d for d in defects), defects


def test_frame_table_flattens_index_and_columns() -> None:
    """``frame_table``: a named index becomes leading columns, a range index does not, two-level columns are
    joined, float columns take ``fmt``; anything but a DataFrame is refused."""
    frame = pd.DataFrame({("Lip", "alice"): [1.23456, 2.0], ("n", ""): [8, 16]}, index=pd.Index([0, 1], name="layer"))
    table = report.frame_table(frame, "constants per layer", ".2f")
    assert table.to_html().startswith("<table><caption>constants per layer</caption>")
    assert "<th>layer</th><th>Lip, alice</th><th>n</th>" in table.to_html() and "<td>1.23</td>" in table.to_html()
    plain = report.frame_table(pd.DataFrame({"a": [0.5]}), "one column")
    assert "<th>a</th></tr>" in plain.to_html() and "index" not in plain.to_html()
    with pytest.raises(TypeError, match="DataFrame"):
        report.frame_table([{"a": 1}], "rows")


def test_a_folded_table_sets_a_title_in_italics_and_leaves_products_alone() -> None:
    """Markdown's *Alice* is <em> in the folded HTML copy, which no Markdown renderer reads; 2 * 3 stays."""
    table = report.markdown_table([{"text": "*Alice*", "cost": "2 * 3", "ids": "a*b*c"}],
                                  caption="windows of *Alice* & more", numbered=False)
    assert "<caption>windows of <em>Alice</em> &amp; more</caption>" in table.data
    assert "<td><em>Alice</em></td><td>2 * 3</td><td>a*b*c</td>" in table.data


def test_a_folded_table_is_plain_html_and_unnumbered() -> None:
    """A table in a folded output keeps its caption but is HTML, which the book does not number."""
    table = report.markdown_table([{"n": 1, "value": 1e-7}], caption="value per length, 1e-7 scale", numbered=False)
    assert table.data.startswith('<table class="table"><caption>value per length, 10⁻⁷ scale</caption>')
    assert ":::{table}" not in table.data and "<td>10⁻⁷</td>" in table.data
    for bad in ({"caption": "the bound $B$"}, {"caption": "see {ref}`x`"}, {"caption": ""},
                {"caption": "ok", "name": "tab-x"}):
        with pytest.raises(ValueError, match="unnumbered table"):
            report.markdown_table([{"n": 1}], numbered=False, **bad)
    with pytest.raises(TypeError, match="numbered"):
        report.markdown_table([{"n": 1}], caption="ok", numbered="no")


def test_plain_ticks_write_plain_numbers_at_the_chosen_multiples() -> None:
    """A log axis from 10 to 100 labelled at 1, 2, 5 times each power of ten reads 10, 20, 50, 100; no minor labels."""
    fig, ax = figures.figure("What do the ticks say?")
    ax.loglog([10, 100], [10, 100])
    ax.set_ylim(10, 100)
    figures.plain_ticks(ax.yaxis, subs=(1.0, 2.0, 5.0))
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if 10 <= t.get_position()[1] <= 100]
    assert labels == ["10", "20", "50", "100"]
    assert all(not t.get_text() for t in ax.yaxis.get_minorticklabels())
    figures.plt.close(fig)


def test_a_comfortable_check_says_one_value_or_every_value() -> None:
    """Far inside its bound, one value reads in the singular and many in the plural; a tolerance between 10⁻³
    and 10⁴ is written plainly, as claims write it."""
    report.checks._LEDGER.clear()
    check.below("one value", 0.1, 1.0)
    check.below("two values", [0.1, 0.2], 1.0)
    check.close("one error", 1.0, 1.001, atol=0.05)
    check.close("two errors", [1.0, 2.0], [1.0, 2.0], rtol=1e-12)
    assert [e.detail for e in report.checks._LEDGER] == [
        "the value at most half its bound", "every value at most half its bound",
        "within 0.05, the error at most half of it", "within a relative 1e-12, every error at most half of it"]


def test_a_printed_value_never_ends_in_a_rounding_tie() -> None:
    """A value whose four-digit text ends in 5 gets the digits that say which way it rounds (0.15648, not 0.1565,
    beside prose that says 0.156); a value that is exactly such a number keeps its short text, and one that only
    rounds to a short number keeps its four digits (2.000, not 2)."""
    check.above("a positive gap", 0.15648, 0.0)
    check.close("a share near one half", 0.56547, 0.5, atol=0.1)
    check.between("in the band", 0.69047, 0.6, 1.0)
    check.below("two values apart in the fifth digit", 3.81651, 3.8171)
    check.above("exactly a quarter", 0.25, 0.2)
    check.below("a difference that is not positive", -2.109, 0.0)
    check.below("a slope below an interval's lower end", 1.992, 1.99998, strict=True)
    check.below("an interval's lower end at most two", 1.99998, 2.0)
    assert [e.detail for e in report.checks._LEDGER] == [
        "0.15648 ≥ 0", "0.56547 = 0.5 within 0.1", "0.69047 in [0.6, 1]", "3.81651 ≤ 3.8171", "0.25 ≥ 0.2",
        "-2.109 ≤ 0", "1.992 < 2.000", "1.99998 ≤ 2"]
