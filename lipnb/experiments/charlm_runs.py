"""The recorded language-model experiment (Kim et al., 2021, Sec. 5.3 and App. N): dot-product, L2 and
contractive L2 character Transformers trained on AG_NEWS's text at several depths, with a fixed Adam
learning rate.

``python -m lipnb.experiments.charlm_runs --record NAME`` trains every run of one record once (single-threaded, CPU)
and writes it as JSON, with the curves and their provenance, into ``lipnb/experiments/charlm_records/``; the records
ship with lipnb. ``CHARLM_RECORDS`` names them: ``agnews`` (depths 1, 2, 4), ``agnews-deep`` (depths 8 and 12,
fewer steps, trained later) and ``agnews-depth`` (dot-product and tied L2 only, depths 16 and 24, three seeds
each, fewer steps again: Kim et al.'s claim that dot-product attention fails beyond ten layers). A chapter
reads them with :func:`charlm_record` (or every curve at once, :func:`charlm_curves`), re-runs the first steps of
each run with :func:`replay_charlm` (:func:`replay_first_steps` beside the record), reads the curves with
:func:`curve_table`, and compares them with the count-based baselines of :func:`charlm_baselines`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import __version__
from ..arguments import check_bool, check_choice, check_positive_int, check_record_file, check_writable_dir
from ..data import ag_news_texts
from ..results import ResultTable, cached_table
from .charlm import CharLM, CharLMConfig, Kind, char_corpus, ngram_bits_per_char, train_char_lm
from .ngram import kneser_ney_bits_per_char, kneser_ney_window_bits_per_char

__all__ = [
    "CHARLM_KINDS",
    "CHARLM_RECORDS",
    "CHARLM_SETTINGS",
    "agnews_corpus",
    "charlm_baselines",
    "charlm_curves",
    "charlm_kinds",
    "charlm_record",
    "charlm_seeds",
    "contractive_divisors",
    "cpu_name",
    "curve_table",
    "first_step_below",
    "git_state",
    "logged_value",
    "loss_rises",
    "replay_charlm",
    "replay_first_steps",
    "run_settings",
    "write_record",
]

CHARLM_KINDS: tuple[Kind, ...] = ("dot", "l2", "l2-contractive")
_CHARLM_RECORD = "agnews"
# Each record's depths and number of Adam steps (the deeper runs are shorter, for the CPU budget); a record
# may name its kinds (default: CHARLM_KINDS) and seeds (default: seed 0 only; a run without a seed field has seed 0).
CHARLM_RECORDS: dict[str, dict] = {"agnews": {"depths": (1, 2, 4), "steps": 2000},
                            "agnews-deep": {"depths": (8, 12), "steps": 1000},
                            "agnews-depth": {"depths": (16, 24), "steps": 400, "kinds": ("dot", "l2"),
                                             "seeds": (0, 1, 2)}}
# One configuration for every run; only the depth, the attention and the record's steps change (the
# configuration carries the first record's, which run_settings replaces with each record's own).
CHARLM_SETTINGS = {"config": CharLMConfig(d=64, heads=4, depth=1, context=64, batch=32,
                                          steps=CHARLM_RECORDS[_CHARLM_RECORD]["steps"], lr=1e-2, seed=0),
                   "depths": tuple(d for spec in CHARLM_RECORDS.values() for d in spec["depths"]), "log_every": 25,
                   "valid_chars": 32768}


@lru_cache(maxsize=1)
def agnews_corpus() -> tuple[Tensor, Tensor, list[str]]:
    """AG_NEWS's 7,600 test articles joined by newlines, as character ids: training split, validation split
    (the last tenth) and the alphabet (:func:`lipnb.experiments.charlm.char_corpus`); cached, so treat it as
    read-only."""
    return char_corpus("\n".join(ag_news_texts()))


def charlm_kinds(name: str) -> tuple[Kind, ...]:
    """The attention kinds the record ``name`` trains."""
    return tuple(CHARLM_RECORDS[check_choice(name, "name", CHARLM_RECORDS)].get("kinds", CHARLM_KINDS))


def charlm_seeds(name: str) -> tuple[int, ...]:
    """The seeds the record ``name`` trains each (kind, depth) with."""
    return tuple(CHARLM_RECORDS[check_choice(name, "name", CHARLM_RECORDS)].get("seeds", (0,)))


def _record_of(depth: int) -> str:
    """The name of the record that holds the runs at ``depth``."""
    for name, spec in CHARLM_RECORDS.items():
        if depth in spec["depths"]:
            return name
    raise ValueError(f"depth must be one of {CHARLM_SETTINGS['depths']}; got {depth!r}")


def run_settings(depth: int, seed: int = 0) -> CharLMConfig:
    """The configuration of the recorded run at ``depth`` with ``seed`` (its record's number of steps)."""
    name = _record_of(depth)
    if seed not in charlm_seeds(name):
        raise ValueError(f"seed must be one of {charlm_seeds(name)} at depth {depth}; got {seed!r}")
    return replace(CHARLM_SETTINGS["config"], depth=depth, steps=CHARLM_RECORDS[name]["steps"], seed=seed)


def _record_path(name: str = _CHARLM_RECORD) -> Path:
    """Where the record ``name`` (one of ``CHARLM_RECORDS``, never a path) lives: the folder ``charlm_records`` shipped
    inside lipnb."""
    return Path(__file__).resolve().parent / "charlm_records" / f"{check_choice(name, 'name', CHARLM_RECORDS)}.json"


def charlm_record(name: str = _CHARLM_RECORD) -> dict:
    """The committed record ``name``: settings, provenance and one curve per (kind, depth)."""
    if name not in CHARLM_RECORDS:
        raise ValueError(f"name must be one of {list(CHARLM_RECORDS)}; got {name!r}")
    path = _record_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"no language-model record at {path}; "
                                f"run `python -m lipnb.experiments.charlm_runs --record {name}`")
    return json.loads(path.read_text())


def replay_charlm(kind: Kind, depth: int, steps: int, *, seed: int = 0, divisors: bool = False) -> list[dict]:
    """The first ``steps`` steps of the recorded run (``kind``, ``depth``, ``seed``), re-run here with its settings
    (with ``divisors``, also every block's attention divisor: :func:`lipnb.experiments.charlm.train_char_lm`);
    checked before the corpus is read."""
    config = replace(run_settings(depth, seed), steps=check_positive_int(steps, "steps"))
    check_choice(kind, "kind", charlm_kinds(_record_of(depth)))
    check_bool(divisors, "divisors")
    train, valid, alphabet = agnews_corpus()
    return train_char_lm(train, valid[: CHARLM_SETTINGS["valid_chars"]], len(alphabet), config, kind,
                         log_every=CHARLM_SETTINGS["log_every"], divisors=divisors)


def git_state() -> str:
    """The short commit of lipnb's checkout, ``+dirty`` when its code (not its records) has changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        records = ":(exclude,glob)lipnb/*_records/**"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lipnb", records], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def cpu_name() -> str:
    """The CPU's model name, for a record's provenance."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_record(path: Path, record: dict) -> None:
    """Write ``record`` as JSON at ``path`` atomically (a cut-off never leaves half a record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def first_step_below(curve: Sequence[Mapping[str, Any]], level: float) -> int | None:
    """The first logged step of a recorded curve whose validation bits/char is below ``level`` (``None``: never,
    a diverged row never counts)."""
    return next((row["step"] for row in curve if not row["diverged"] and row["valid_bpc"] < level), None)


def loss_rises(curve: Sequence[Mapping[str, Any]], column: str = "train_bpc") -> list[tuple[int, float]]:
    """``(step, rise)`` for every logged row of a curve after the first: its ``column`` (training bits/char by
    default) minus the lowest logged before it (a spike is a large rise; diverged rows are left out)."""
    logged = [(row["step"], row[column]) for row in curve if not row["diverged"]]
    return [(step, value - min(v for _, v in logged[:i])) for i, (step, value) in enumerate(logged) if i > 0]


def logged_value(curve: Sequence[Mapping[str, Any]], step: int, column: str = "valid_bpc") -> float:
    """The ``column`` (validation bits/char by default) a recorded curve logged at ``step``."""
    for row in curve:
        if row["step"] == step and not row["diverged"]:
            return row[column]
    raise ValueError(f"the curve logged no step {step} (logged: {[row['step'] for row in curve]})")


def charlm_curves(*names: str) -> dict[tuple[Kind, int, int], list[dict]]:
    """The logged rows of every run of the records ``names`` (all of :data:`CHARLM_RECORDS` by default), keyed by
    ``(kind, depth, seed)``."""
    curves = {}
    for name in names or tuple(CHARLM_RECORDS):
        for run in charlm_record(name)["runs"]:
            curves[run["kind"], run["depth"], run.get("seed", 0)] = run["rows"]
    return curves


def curve_table(curves: Mapping[tuple[Kind, int, int], Sequence[Mapping[str, Any]]], *, at: int | None = None,
                levels: Sequence[float] = ()) -> ResultTable:
    """What a chapter reads off each recorded curve (Kim et al.'s Sec. 5.3 comparison), one row per run.

    Columns ``kind, depth, seed, last_step, diverged`` (0 or 1), ``train_first`` (training bits/char at the first
    logged step), ``valid_first`` and ``valid_last`` (validation bits/char at the first and last logged step),
    ``valid_best`` (its lowest), ``valid_at`` (at step ``at``, when given), ``train_rise`` and
    ``train_rise_step`` (the largest rise of the logged training loss above the lowest logged before it,
    :func:`loss_rises`, and where it happens; 0 at the first step for a loss that never rises), ``valid_rise``
    and ``valid_rise_step`` (the same for the validation loss), and for each of ``levels`` a column
    ``below_<k>``: the first logged step below ``levels[k]`` (:func:`first_step_below`; NaN where never).
    """
    columns: dict[str, list] = {k: [] for k in ("kind", "depth", "seed", "last_step", "diverged", "train_first",
                                                "valid_first", "valid_last", "valid_best", "train_rise",
                                                "train_rise_step", "valid_rise", "valid_rise_step")}
    if at is not None:
        columns["valid_at"] = []
    for k in range(len(levels)):
        columns[f"below_{k}"] = []
    for (kind, depth, seed), curve in curves.items():
        logged = [row for row in curve if not row["diverged"]]
        if not logged:
            raise ValueError(f"the run ({kind}, {depth}, {seed}) logged no finite row")
        never = (logged[0]["step"], 0.0)  # no rise: the loss never went above its lowest earlier value
        train_step, train_rise = max([never, *loss_rises(curve)], key=lambda sr: sr[1])
        valid_step, valid_rise = max([never, *loss_rises(curve, "valid_bpc")], key=lambda sr: sr[1])
        row = {"kind": kind, "depth": depth, "seed": seed, "last_step": curve[-1]["step"],
               "diverged": int(bool(curve[-1]["diverged"])), "train_first": logged[0]["train_bpc"],
               "valid_first": logged[0]["valid_bpc"],
               "valid_last": logged[-1]["valid_bpc"], "valid_best": min(r["valid_bpc"] for r in logged),
               "train_rise": train_rise, "train_rise_step": train_step, "valid_rise": valid_rise,
               "valid_rise_step": valid_step}
        if at is not None:
            row["valid_at"] = logged_value(curve, at)
        for k, level in enumerate(levels):
            step = first_step_below(curve, level)
            row[f"below_{k}"] = math.nan if step is None else float(step)
        for key, value in row.items():
            columns[key].append(value)
    return ResultTable.from_columns(columns, {"curves": len(curves), "at": at, "levels": list(levels)})


def charlm_baselines(orders: tuple[int, ...] = (1, 2, 3, 4, 5)) -> ResultTable:
    """The count-based baselines of the language models (Kim et al., Sec. 5.3): validation bits/char of ``n``-grams
    fitted on the training split, on the runs' validation characters.

    Columns ``order``, ``add_one`` (add-one smoothing; orders up to 4, NaN above: its dense table would not fit),
    ``kneser_ney`` (interpolated Kneser-Ney, every character with its full context) and ``kneser_ney_windows``
    (the same model scored as the language models are: windows of the context length whose context restarts at
    each window, :func:`lipnb.experiments.ngram.kneser_ney_window_bits_per_char`). Cached.
    """
    window = CHARLM_SETTINGS["config"].context

    def compute() -> dict[str, list]:
        train, valid, alphabet = agnews_corpus()
        scored, vocab = valid[: CHARLM_SETTINGS["valid_chars"]], len(alphabet)
        return {"order": list(orders),
                "add_one": [ngram_bits_per_char(train, scored, vocab, n) if n <= 4 else math.nan for n in orders],
                "kneser_ney": [kneser_ney_bits_per_char(train, scored, vocab, n) for n in orders],
                "kneser_ney_windows": [kneser_ney_window_bits_per_char(train, scored, vocab, n, window)
                                       for n in orders]}

    return cached_table("charlm_baselines", {"orders": list(orders), "window": window,
                                             "valid_chars": CHARLM_SETTINGS["valid_chars"]}, compute)


def replay_first_steps(runs: Sequence[tuple[Kind, int, int]], steps: int | None = None) -> ResultTable:
    """The first ``steps`` steps (one logging interval by default) of each recorded run ``(kind, depth, seed)``,
    re-run now (:func:`replay_charlm`) beside the record: columns ``kind, depth, seed, train_rerun,
    train_record, valid_rerun, valid_record`` (bits/char at the first logged step). Never cached: it is the test
    that the code still trains what the record holds."""
    steps = CHARLM_SETTINGS["log_every"] if steps is None else steps
    curves = charlm_curves(*dict.fromkeys(_record_of(depth) for _, depth, _ in runs))
    columns: dict[str, list] = {k: [] for k in ("kind", "depth", "seed", "train_rerun", "train_record",
                                                "valid_rerun", "valid_record")}
    for kind, depth, seed in runs:
        row, ref = replay_charlm(kind, depth, steps, seed=seed)[0], curves[kind, depth, seed][0]
        if ref["step"] != row["step"]:
            raise ValueError(f"the record's first logged step is {ref['step']}, the re-run's {row['step']}")
        for key, value in zip(columns, (kind, depth, seed, row["train_bpc"], ref["train_bpc"], row["valid_bpc"],
                                        ref["valid_bpc"]), strict=True):
            columns[key].append(value)
    return ResultTable.from_columns(columns, {"steps": steps, "runs": len(runs)})


def contractive_divisors(depths: Sequence[int]) -> ResultTable:
    """What each block of the contractive model divides its attention by at initialisation (Theorem 3.2's sharpened
    2-norm bound at the context length, at least 1), rebuilt exactly as each recorded run at ``depths`` started:
    columns ``depth, block, divisor``."""
    _, _, alphabet = agnews_corpus()
    columns: dict[str, list] = {"depth": [], "block": [], "divisor": []}
    for depth in depths:
        config = run_settings(depth)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            model = CharLM(len(alphabet), config, "l2-contractive")
        with torch.no_grad():
            for block, layer in enumerate(model.blocks):
                columns["depth"].append(depth)
                columns["block"].append(block)
                columns["divisor"].append(float(layer["attn"].bound(config.context).clamp_min(1.0)))
    return ResultTable.from_columns(columns, {"depths": list(depths)})


def _main(argv: Sequence[str] | None = None) -> int:
    """Train every run of one record once and write it (after each run, so that a cut-off keeps its curves)."""
    parser = argparse.ArgumentParser(prog="python -m lipnb.experiments.charlm_runs",
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--record", choices=list(CHARLM_RECORDS), default=_CHARLM_RECORD)
    parser.add_argument("--out", type=Path, help="where to write the record (default: its place in lipnb)")
    parser.add_argument("--drift", action="store_true",
                        help="re-run the first logged steps of every recorded run here and store the largest "
                             "difference under this process's ATen CPU capability (set ATEN_CPU_CAPABILITY)")
    args = parser.parse_args(argv)
    out, spec = args.out or _record_path(args.record), CHARLM_RECORDS[args.record]
    try:   # --out checked before any training: a one-line error, exit status 2
        if args.drift:
            record = check_record_file(out, "--out", ("runs",))
        elif out.is_dir():
            raise ValueError(f"--out {out} is a folder; give the record's file")
        else:
            check_writable_dir(out.parent, "--out")
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    torch.set_num_threads(1)
    if args.drift:
        per_run = []  # each run's largest difference, in the order of the runs
        for run in record["runs"]:
            row = replay_charlm(run["kind"], run["depth"], CHARLM_SETTINGS["log_every"], seed=run.get("seed", 0))[0]
            ref = run["rows"][0]
            per_run.append(max(abs(row["train_bpc"] - ref["train_bpc"]), abs(row["valid_bpc"] - ref["valid_bpc"])))
        drift = max(per_run)
        capability = torch.backends.cpu.get_cpu_capability().lower()
        record.setdefault("replay_drift", {})[capability] = {
            "steps": CHARLM_SETTINGS["log_every"], "max_abs_bpc": drift, "per_run_max_abs_bpc": per_run,
            "git": git_state()}
        write_record(out, record)
        print(f"largest difference of the first logged values under {capability}: {drift:.3g} bits/char")
        return 0
    train, valid, alphabet = agnews_corpus()
    record = {
        "schema": 1,
        "experiment": "char LMs on AG_NEWS text: dot-product, L2, contractive L2 attention (Kim et al. Sec. 5.3)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m lipnb.experiments.charlm_runs " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {"config": asdict(replace(CHARLM_SETTINGS["config"], steps=spec["steps"])),
                     "depths": list(spec["depths"]),
                     "kinds": list(charlm_kinds(args.record)), "seeds": list(charlm_seeds(args.record)),
                     "log_every": CHARLM_SETTINGS["log_every"],
                     "valid_chars": CHARLM_SETTINGS["valid_chars"], "train_chars": len(train),
                     "valid_split_chars": len(valid), "alphabet": len(alphabet)},
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
                    "platform": platform.platform(), "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                    "load_average_start": list(os.getloadavg())},
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "lipnb": __version__,
                     "git": git_state()},
        "runs": [],
    }
    # The shallower depth first, every seed of it, so that a cut-off leaves whole depths.
    for depth in sorted(spec["depths"]):
        for seed in charlm_seeds(args.record):
            for kind in charlm_kinds(args.record):
                start = time.process_time()
                rows = train_char_lm(train, valid[: CHARLM_SETTINGS["valid_chars"]], len(alphabet),
                                     run_settings(depth, seed), kind, log_every=CHARLM_SETTINGS["log_every"])
                for row in rows:
                    if row["diverged"]:
                        row["train_bpc"] = row["valid_bpc"] = None
                record["runs"].append({"kind": kind, "depth": depth, "seed": seed,
                                       "cpu_seconds": time.process_time() - start, "rows": rows})
                record["machine"]["load_average_end"] = list(os.getloadavg())
                write_record(out, record)
                print(f"depth {depth} seed {seed} {kind}: last valid bpc {rows[-1]['valid_bpc']} "
                      f"({record['runs'][-1]['cpu_seconds']:.0f} CPU-s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
