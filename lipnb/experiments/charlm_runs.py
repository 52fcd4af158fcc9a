"""The recorded language-model experiment (Kim et al., 2021, Sec. 5.3 and App. N): dot-product, L2 and
contractive L2 character Transformers trained on AG_NEWS's text at several depths, with a fixed Adam
learning rate.

``python -m lipnb.experiments.charlm_runs --record NAME`` trains every run of one record once (single-threaded, CPU)
and writes it as JSON, with the curves and their provenance, into ``lipnb/experiments/charlm_records/``; the records
ship with lipnb. ``RECORDS`` names them: ``agnews`` (depths 1, 2, 4), ``agnews-deep`` (depths 8 and 12,
fewer steps, trained later) and ``agnews-depth`` (dot-product and tied L2 only, depths 16 and 24, three seeds
each, fewer steps again: Kim et al.'s claim that dot-product attention fails beyond ten layers). A chapter
reads them with :func:`charlm_record` and re-runs the first steps of each run with :func:`replay_charlm`.
"""

from __future__ import annotations

import argparse
import json
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
from .charlm import CharLMConfig, Kind, char_corpus, train_char_lm

__all__ = [
    "KINDS",
    "RECORD",
    "RECORDS",
    "SETTINGS",
    "agnews_corpus",
    "charlm_record",
    "cpu_name",
    "first_below",
    "git_state",
    "kinds_of",
    "main",
    "record_of",
    "record_path",
    "replay_charlm",
    "rises",
    "run_settings",
    "seeds_of",
    "value_at",
    "write_record",
]

KINDS: tuple[Kind, ...] = ("dot", "l2", "l2-contractive")
RECORD = "agnews"
# Each record's depths and number of Adam steps (the deeper runs are shorter, for the CPU budget); a record
# may name its kinds (default: KINDS) and seeds (default: seed 0 only; a run without a seed field has seed 0).
RECORDS: dict[str, dict] = {"agnews": {"depths": (1, 2, 4), "steps": 2000},
                            "agnews-deep": {"depths": (8, 12), "steps": 1000},
                            "agnews-depth": {"depths": (16, 24), "steps": 400, "kinds": ("dot", "l2"),
                                             "seeds": (0, 1, 2)}}
# One configuration for every run; only the depth, the attention and the record's steps change (the
# configuration carries the first record's, which run_settings replaces with each record's own).
SETTINGS = {"config": CharLMConfig(d=64, heads=4, depth=1, context=64, batch=32, steps=RECORDS[RECORD]["steps"],
                                   lr=1e-2, seed=0),
            "depths": tuple(d for spec in RECORDS.values() for d in spec["depths"]), "log_every": 25,
            "valid_chars": 32768}


@lru_cache(maxsize=1)
def agnews_corpus() -> tuple[Tensor, Tensor, list[str]]:
    """AG_NEWS's 7,600 test articles joined by newlines, as character ids: training split, validation split
    (the last tenth) and the alphabet (:func:`lipnb.experiments.charlm.char_corpus`); cached, so treat it as
    read-only."""
    return char_corpus("\n".join(ag_news_texts()))


def kinds_of(name: str) -> tuple[Kind, ...]:
    """The attention kinds the record ``name`` trains."""
    return tuple(RECORDS[check_choice(name, "name", RECORDS)].get("kinds", KINDS))


def seeds_of(name: str) -> tuple[int, ...]:
    """The seeds the record ``name`` trains each (kind, depth) with."""
    return tuple(RECORDS[check_choice(name, "name", RECORDS)].get("seeds", (0,)))


def record_of(depth: int) -> str:
    """The name of the record that holds the runs at ``depth``."""
    for name, spec in RECORDS.items():
        if depth in spec["depths"]:
            return name
    raise ValueError(f"depth must be one of {SETTINGS['depths']}; got {depth!r}")


def run_settings(depth: int, seed: int = 0) -> CharLMConfig:
    """The configuration of the recorded run at ``depth`` with ``seed`` (its record's number of steps)."""
    name = record_of(depth)
    if seed not in seeds_of(name):
        raise ValueError(f"seed must be one of {seeds_of(name)} at depth {depth}; got {seed!r}")
    return replace(SETTINGS["config"], depth=depth, steps=RECORDS[name]["steps"], seed=seed)


def record_path(name: str = RECORD) -> Path:
    """Where the record ``name`` (one of ``RECORDS``, never a path) lives: the folder ``charlm_records`` shipped
    inside lipnb."""
    return Path(__file__).resolve().parent / "charlm_records" / f"{check_choice(name, 'name', RECORDS)}.json"


def charlm_record(name: str = RECORD) -> dict:
    """The committed record ``name``: settings, provenance and one curve per (kind, depth)."""
    if name not in RECORDS:
        raise ValueError(f"name must be one of {list(RECORDS)}; got {name!r}")
    path = record_path(name)
    if not path.is_file():
        raise FileNotFoundError(f"no language-model record at {path}; "
                                f"run `python -m lipnb.experiments.charlm_runs --record {name}`")
    return json.loads(path.read_text())


def replay_charlm(kind: Kind, depth: int, steps: int, *, seed: int = 0, divisors: bool = False) -> list[dict]:
    """The first ``steps`` steps of the recorded run (``kind``, ``depth``, ``seed``), re-run here with its settings
    (with ``divisors``, also every block's attention divisor: :func:`lipnb.experiments.charlm.train_char_lm`);
    checked before the corpus is read."""
    config = replace(run_settings(depth, seed), steps=check_positive_int(steps, "steps"))
    check_choice(kind, "kind", kinds_of(record_of(depth)))
    check_bool(divisors, "divisors")
    train, valid, alphabet = agnews_corpus()
    return train_char_lm(train, valid[: SETTINGS["valid_chars"]], len(alphabet), config, kind,
                         log_every=SETTINGS["log_every"], divisors=divisors)


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


def first_below(curve: Sequence[Mapping[str, Any]], level: float) -> int | None:
    """The first logged step of a recorded curve whose validation bits/char is below ``level`` (``None``: never,
    a diverged row never counts)."""
    return next((row["step"] for row in curve if not row["diverged"] and row["valid_bpc"] < level), None)


def rises(curve: Sequence[Mapping[str, Any]]) -> list[tuple[int, float]]:
    """``(step, rise)`` for every logged row of a curve after the first: its training bits/char minus the lowest
    logged before it (a spike is a large rise; diverged rows are left out)."""
    logged = [(row["step"], row["train_bpc"]) for row in curve if not row["diverged"]]
    return [(step, value - min(v for _, v in logged[:i])) for i, (step, value) in enumerate(logged) if i > 0]


def value_at(curve: Sequence[Mapping[str, Any]], step: int, column: str = "valid_bpc") -> float:
    """The ``column`` (validation bits/char by default) a recorded curve logged at ``step``."""
    for row in curve:
        if row["step"] == step and not row["diverged"]:
            return row[column]
    raise ValueError(f"the curve logged no step {step} (logged: {[row['step'] for row in curve]})")


def main(argv: Sequence[str] | None = None) -> int:
    """Train every run of one record once and write it (after each run, so that a cut-off keeps its curves)."""
    parser = argparse.ArgumentParser(prog="python -m lipnb.experiments.charlm_runs",
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--record", choices=list(RECORDS), default=RECORD)
    parser.add_argument("--out", type=Path, help="where to write the record (default: its place in lipnb)")
    parser.add_argument("--drift", action="store_true",
                        help="re-run the first logged steps of every recorded run here and store the largest "
                             "difference under this process's ATen CPU capability (set ATEN_CPU_CAPABILITY)")
    args = parser.parse_args(argv)
    out, spec = args.out or record_path(args.record), RECORDS[args.record]
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
            row = replay_charlm(run["kind"], run["depth"], SETTINGS["log_every"], seed=run.get("seed", 0))[0]
            ref = run["rows"][0]
            per_run.append(max(abs(row["train_bpc"] - ref["train_bpc"]), abs(row["valid_bpc"] - ref["valid_bpc"])))
        drift = max(per_run)
        capability = torch.backends.cpu.get_cpu_capability().lower()
        record.setdefault("replay_drift", {})[capability] = {"steps": SETTINGS["log_every"], "max_abs_bpc": drift,
                                                             "per_run_max_abs_bpc": per_run, "git": git_state()}
        write_record(out, record)
        print(f"largest difference of the first logged values under {capability}: {drift:.3g} bits/char")
        return 0
    train, valid, alphabet = agnews_corpus()
    record = {
        "schema": 1,
        "experiment": "char LMs on AG_NEWS text: dot-product, L2, contractive L2 attention (Kim et al. Sec. 5.3)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m lipnb.experiments.charlm_runs " + " ".join(argv if argv is not None else sys.argv[1:]),
        "settings": {"config": asdict(replace(SETTINGS["config"], steps=spec["steps"])), "depths": list(spec["depths"]),
                     "kinds": list(kinds_of(args.record)), "seeds": list(seeds_of(args.record)),
                     "log_every": SETTINGS["log_every"],
                     "valid_chars": SETTINGS["valid_chars"], "train_chars": len(train),
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
        for seed in seeds_of(args.record):
            for kind in kinds_of(args.record):
                start = time.process_time()
                rows = train_char_lm(train, valid[: SETTINGS["valid_chars"]], len(alphabet), run_settings(depth, seed),
                                     kind, log_every=SETTINGS["log_every"])
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
    raise SystemExit(main())
