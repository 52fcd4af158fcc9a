"""A battery of bad and edge inputs, a few per class of issue 53 (items 3 and 4, less the estimator's own), each
answered by a clear error (a ``ValueError``/``TypeError`` whose one-line message names the argument, raised by lipnb
and not from inside torch, pandas or pathlib; or argparse's exit status 2) or by the right answer."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import traceback
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from lipnb import models, profiles, results, self_attention
from lipnb.core import bounds
from lipnb.experiments import charlm, charlm_runs, stats, verdicts
from lipnb.experiments import long_context as lc
from lipnb.models import llama
from lipnb.report import check
from lipnb.results import ResultTable

F64 = torch.float64
A = torch.eye(3, dtype=F64)
LLAMA = llama.random_llama(0)


def clear(name: str) -> Callable[[Callable[[], object]], None]:
    """The call raises a ValueError or TypeError, from lipnb, whose one-line message names ``name``."""

    def expect(call: Callable[[], object]) -> None:
        with pytest.raises((ValueError, TypeError)) as info:
            call()
        message = str(info.value)
        assert name.lower() in message.lower() and "\n" not in message, message
        raised_in = traceback.extract_tb(info.tb)[-1].filename
        assert "/lipnb/" in raised_in.replace("\\", "/"), f"raised in {raised_in}: {message}"

    return expect


def answer(holds: Callable[[object], bool]) -> Callable[[Callable[[], object]], None]:
    """The call returns a value for which ``holds`` is true."""

    def expect(call: Callable[[], object]) -> None:
        assert holds(call())

    return expect


def command_line(words: str) -> Callable[[Callable[[], object]], None]:
    """The command line exits with status 2 (argparse's) and says ``words`` on its last line of stderr."""

    def expect(call: Callable[[], object]) -> None:
        err = io.StringIO()
        with pytest.raises(SystemExit) as info, contextlib.redirect_stderr(err):
            call()
        assert info.value.code == 2 and words in err.getvalue().strip().splitlines()[-1], err.getvalue()

    return expect


CASES: dict[str, list[tuple[str, Callable[[], object], Callable]]] = {
    "model names": [
        ("Arabic-Indic digit seed", lambda: models.load("gpt2-random:٣"), clear("gpt2-random:٣")),
        ("seed beyond 2**64", lambda: models.load("gpt2-random:99999999999999999999999"), clear("seed")),
        ("superscript seed", lambda: models.load("gpt2-random:²"), clear("gpt2-random")),
    ],
    "devices": [
        ("meta device", lambda: models.load("llama-random", device="meta"), clear("meta")),
        ("XPU not built", lambda: models.load("llama-random", device="xpu"), clear("device")),
        ("map on meta tensors", lambda: models.attention_map(LLAMA, 0)(torch.empty(1, 2, 256, device="meta")),
         clear("meta")),
        ("self-attention on meta", lambda: self_attention(torch.empty(1, 2, 3, device="meta"), A, A), clear("meta")),
    ],
    "input dtype": [
        ("float16 into a float32 Llama map", lambda: models.attention_map(LLAMA, 0)(torch.ones(1, 2, 256).half()),
         clear("X")),
        ("bfloat16 into a float32 Llama block", lambda: models.attention_map(LLAMA, 0, "block").linearize(
            torch.ones(1, 2, 256).bfloat16()), clear("X")),
        ("float64 into a float32 Llama map", lambda: models.attention_map(LLAMA, 0)(torch.ones(1, 2, 256, dtype=F64)),
         answer(lambda Y: Y.dtype == F64)),
    ],
    "flops": [
        ("flops(0)", lambda: models.attention_map(LLAMA, 0).flops(0), clear("n")),
        ("flops(-5)", lambda: models.attention_map(LLAMA, 0).flops(-5), clear("n")),
        ("flops(1)", lambda: models.attention_map(LLAMA, 0).flops(1), answer(lambda f: min(f.values()) > 0)),
    ],
    "profiles": [
        ("per_length as a string", lambda: dataclasses.replace(profiles.PROFILES["quick"], per_length="3"),
         clear("per_length")),
        ("lengths as a string", lambda: dataclasses.replace(profiles.PROFILES["quick"], lengths="8 16"),
         clear("lengths")),
    ],
    "cache": [
        ("a scalar column", lambda: ResultTable.from_columns({"x": 5}, {}), clear("column 'x'")),
        ("a missing table", lambda: ResultTable.read_csv("/nonexistent/table.csv"), clear("table.csv")),
    ],
    "bounds": [
        ("R and n that do not broadcast", lambda: bounds.theorem_3_3(A, A, torch.ones(3), torch.ones(4)),
         clear("broadcast")),
        ("a NaN step constant", lambda: bounds.flow_gronwall_log(A, A, 1.0, 4, 1.0, 3,
                                                                  torch.tensor([1.0, math.nan, 1.0], dtype=F64)),
         clear("step_constants")),
        ("step constants of the wrong length", lambda: bounds.flow_gronwall_log(
            A, A, 1.0, 4, 1.0, 3, torch.ones(2, dtype=F64)), clear("step_constants")),
        ("step constants as a list", lambda: bounds.flow_gronwall_log(A, A, 1.0, 4, 1.0, 3, [1.0, 1.0, 1.0]),
         clear("step_constants")),
        ("X wider than A", lambda: bounds.theorem_3_7_limit(torch.ones(1, 2, 5, dtype=F64), A, A), clear("d = 5")),
    ],
    "statistics": [
        ("level as a string", lambda: stats.student_interval(torch.tensor([1.0, 2.0]), level="0.95"),
         clear("level")),
        ("zero-spread interval", lambda: stats.student_interval(torch.full((3,), 2.0)),
         answer(lambda t: t == (2.0, 2.0, 2.0))),
        ("a break fit on a zero", lambda: stats.power_law_break([0, *range(2, 13)], range(1, 13)), clear("n")),
        ("a break fit on a NaN", lambda: stats.power_law_break(range(1, 13), [math.nan, *range(2, 13)]),
         clear("lip")),
        ("a break fit of unequal lists", lambda: stats.power_law_break(range(1, 13), range(1, 12)),
         clear("same number")),
        ("a bootstrap of one point per length", lambda: stats.bootstrap_slope([1.0, 2, 3], [1.0, 2, 4]),
         clear("one point")),
        ("growth fits of an empty table", lambda: stats.growth_fits(pd.DataFrame({"g": [], "n": [], "lip": []}),
                                                                     ["g"]), answer(lambda f: f.empty)),
        ("a NaN group key", lambda: stats.growth_fits(pd.DataFrame({"g": [math.nan] * 3, "n": [1, 2, 4],
                                                                     "lip": [1.0, 2, 3]}), ["g"]), clear("'g'")),
    ],
    "verdicts and checks": [
        ("a NaN interval", lambda: verdicts.interval_verdict(0.5, math.nan, math.nan), clear("low")),
        ("a NaN bound's interval", lambda: verdicts.bound_verdict(0.5, math.nan), clear("high")),
        ("a NaN side", lambda: stats.side(math.nan, math.nan), clear("low")),
        ("below an infinite bound", lambda: check.below("finite below infinity", 1.0, math.inf), clear("bound")),
    ],
    "long context": [
        ("two empty records", lambda: lc.agreement({}, {}), clear("rows")),
        ("an unknown text", lambda: lc._measure_text("nope", 512), clear("text")),
        ("negative draws", lambda: lc.rounding_sensitivity(draws=-1), clear("draws")),
        ("--threads 0", lambda: lc._main(["--text", "alice", "--threads", "0"]), command_line("--threads")),
        ("a folder as --record", lambda: lc._main(["--text", "alice", "--record", "/"]), command_line("folder")),
    ],
    "character models": [
        ("no heads", lambda: charlm.CharLMConfig(heads=0), clear("heads")),
        ("no log interval", lambda: charlm.train_char_lm(torch.arange(40) % 5, torch.arange(40) % 5, 5,
                                                         charlm.CharLMConfig(d=8, context=4), "dot", log_every=0),
         clear("log_every")),
        ("a text shorter than the context", lambda: charlm.train_char_lm(
            torch.arange(10) % 5, torch.arange(10) % 5, 5, charlm.CharLMConfig(context=16), "dot"), clear("train")),
        ("a record name as a path", lambda: charlm_runs.charlm_record("../../x"), clear("name")),
        ("negative ids", lambda: charlm.ngram_bits_per_char(torch.tensor([0, 1, -1, 2]), torch.tensor([0, 1]), 3, 2),
         clear("0..2")),
        ("--drift with a missing --out", lambda: charlm_runs._main(["--drift", "--out", "/nonexistent/x.json"]),
         command_line("--out")),
    ],
}


@pytest.mark.parametrize(("label", "call", "expect"), [case for cases in CASES.values() for case in cases],
                         ids=[f"{group}: {case[0]}" for group, cases in CASES.items() for case in cases])
def test_each_bad_input_gets_a_clear_error_or_the_right_answer(label: str, call: Callable[[], object],
                                                               expect: Callable, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(lc.models, "load_shared", lambda *_: pytest.fail(f"{label}: SmolLM2 was loaded"))
    expect(call)
