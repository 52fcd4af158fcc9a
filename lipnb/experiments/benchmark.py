"""Benchmarks of :func:`lipnb.local_lipschitz` against the paper's method (App. E.1, the loop as intended is
:func:`lipnb.paper.published.paper_power_iteration`): the recorded runs (where they live, how to read them,
how to tabulate them).

``bench/lipschitz.py`` (in the repository) writes one JSON record per run. The records committed with
lipnb ship inside the package (``lipnb/experiments/benchmark_records/``), so they are found after any install;
the environment variable ``LIPNB_BENCH_DIR`` names another folder to read and write instead.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_VAR",
    "METHOD_LABELS",
    "PAPER_BASELINES",
    "Table",
    "cpu_speedup",
    "decomposition",
    "lipnb_calls",
    "load_record",
    "provenance",
    "record_path",
    "records_dir",
    "relative_errors",
    "table",
    "workload_table",
]

ENV_VAR = "LIPNB_BENCH_DIR"

METHOD_LABELS = {"paper": "paper (App. E.1)", "lipnb": "lipnb", "lipnb-f32": "lipnb, no bfloat16 presolve",
                 "lipnb-tight": "lipnb, tol 1e-6", "lipnb-autograd": "lipnb, autograd products",
                 "lipnb-f64": "lipnb, float64 products"}


# The paper's loop in ``bench/workloads.py``'s records: as published, and stopped by an oracle at 1e-4 of the reference.
PAPER_BASELINES = ("paper", "paper-oracle")


def lipnb_calls(row: dict) -> dict[str, dict]:
    """The ``local_lipschitz`` calls of one run of ``bench/workloads.py``'s record (all but the paper's loops)."""
    return {method: entry for method, entry in row["methods"].items() if method not in PAPER_BASELINES}


def records_dir() -> Path:
    """The folder of benchmark records: ``$LIPNB_BENCH_DIR`` when set, else the records shipped with lipnb."""
    folder = os.environ.get(ENV_VAR)
    return Path(folder) if folder else Path(__file__).resolve().parent / "benchmark_records"


def record_path(name: str) -> Path:
    """Where the record ``name`` (e.g. ``"lipschitz-cpu"``) is read and written."""
    return records_dir() / f"{name}.json"


def load_record(name: str | Path) -> dict | None:
    """A recorded benchmark by name (or path), or ``None`` when it was never recorded."""
    path = Path(name) if isinstance(name, Path) else record_path(name)
    return json.loads(path.read_text()) if path.exists() else None


def relative_errors(values: list[float], ref: list[float]) -> list[float]:
    """``|v - r| / r`` for each estimate ``v`` and reference ``r``."""
    return [abs(v - r) / r for v, r in zip(values, ref, strict=True)]


def provenance(record: dict) -> str:
    """One line: when, where and with what the benchmark ran."""
    versions = record["versions"]
    return (f"{record['date'][:10]}, {record['device_name']} ({record['device']}, {record['threads']} threads, "
            f"load average {record['load_average']['start'][0]}), torch {versions['torch']}, lipnb "
            f"{versions['lipnb']} (git {versions['git']}), matrix-product peaks "
            + ", ".join(f"{dtype} {peak / 1e9:.0f}" for dtype, peak in record["peak_flops_by_dtype"].items())
            + " GFLOP/s")


def cpu_speedup(row: dict, method: str = "lipnb") -> float | None:
    """The paper's median CPU time over ``method``'s: the speedup less sensitive to a shared machine's
    stolen time (both methods run on the same threads), ``None`` without the paper's method."""
    if "paper" not in row["methods"] or method == "paper":
        return None
    return row["methods"]["paper"]["median_cpu_s"] / row["methods"][method]["median_cpu_s"]


def decomposition(row: dict, method: str = "lipnb") -> dict[str, float]:
    """The speedup of ``method`` over the paper's loop as (FLOPs per estimate ratio) x (FLOP rate ratio)."""
    paper, ours = row["methods"]["paper"], row["methods"][method]
    steps_ours = ours["mean_iterations"] + ours.get("mean_presolve_iterations", 0)
    flops_paper = paper["flops_per_product"] * paper["mean_iterations"]
    flops_ours = ours["flops_per_product"] * steps_ours + ours["flops_linearize"]
    return {"speedup": row["speedup"][method], "flops_per_step": paper["flops_per_product"] / ours["flops_per_product"],
            "steps": paper["mean_iterations"] / steps_ours, "flops": flops_paper / flops_ours,
            "rate": ours["achieved_flops"] / paper["achieved_flops"]}


@dataclass(frozen=True, repr=False)
class Table:
    """A table that Jupyter shows as HTML and that prints (and reprs) as Markdown."""

    header: list[str]
    rows: list[list[str]]

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        lines = [self.header, ["---"] * len(self.header), *self.rows]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def table(record: dict) -> Table:
    """The benchmark, one line per (model, kind, n, method)."""
    header = ["model", "kind", "n", "inputs", "method", "ms / estimate", "speedup (CPU time)",
              "JᵀJ products / estimate (+ bfloat16)", "MFLOP / product", "GFLOP/s (% of peak)",
              "peak MiB / input", "max rel. error", "converged"]
    rows = []
    for row in record["runs"]:
        for method, v in row["methods"].items():
            speedup, cpu = row["speedup"].get(method), cpu_speedup(row, method)
            presolved = v.get("mean_presolve_iterations", 0)
            rows.append([f"{row['model']} L{row['layer']}", row["kind"], str(row["n"]), str(row["batch"]),
                         METHOD_LABELS[method], f"{v['per_input_s'] * 1e3:.1f}",
                         "" if speedup is None else f"{speedup:.1f}x ({cpu:.1f}x)",
                         f"{v['mean_iterations']:.1f}" + (f" (+ {presolved:.1f})" if presolved else ""),
                         f"{v['flops_per_product'] / 1e6:.0f}",
                         f"{v['achieved_flops'] / 1e9:.1f} ({100 * v['fraction_of_peak']:.0f}%)",
                         f"{v['peak_MiB'] / row['batch']:.1f}", f"{v['max_rel_error']:.1e}",
                         f"{v['converged']}/{row['batch']}"])
    return Table(header, rows)


def workload_table(record: dict) -> Table:
    """``bench/workloads.py``'s record, one line per (workload, call): median seconds [range] and speedups
    over the paper's loop (as published, and stopped by the oracle at 1e-4) in wall and CPU time, products per
    input and the time split (CPU)."""
    header = ["workload", "threads", "call", "wall s [range]", "CPU s [range]", "speedup wall (CPU)",
              "against the oracle-stopped loop", "first call (cold)", "products / input (+ bfloat16)",
              "linearise / products / solver (CPU)", "max rel. error"]
    rows = []
    for row in record["runs"]:
        for method, v in row["methods"].items():
            speedup, oracle = row["speedup"].get(method), row["speedup_oracle"].get(method)
            cold = row["speedup_cold"].get(method)
            split = v.get("split")
            steps = f"{v['mean_iterations']:.1f}" + (f" (+ {v['mean_presolve_iterations']:.1f})"
                                                     if v.get("mean_presolve_iterations") else "")
            rows.append([f"{row['workload']}: {row['model']} L{row['layer']}, n = {row['n']}, {row['batch']} inputs",
                         str(row["threads"]), method,
                         f"{v['wall']['median']:.2f} [{v['wall']['min']:.2f}-{v['wall']['max']:.2f}]",
                         f"{v['cpu']['median']:.2f} [{v['cpu']['min']:.2f}-{v['cpu']['max']:.2f}]",
                         "" if speedup is None else f"{speedup['wall']:.1f}x ({speedup['cpu']:.1f}x)",
                         "" if oracle is None else f"{oracle['wall']:.1f}x ({oracle['cpu']:.1f}x)",
                         "" if cold is None else f"{cold['wall']:.1f}x ({cold['cpu']:.1f}x)", steps,
                         "" if split is None else " / ".join(f"{split[f'{part}_cpu_s'] / split['cpu_s']:.0%}"
                                                              for part in ("linearize", "products", "solver")),
                         f"{v['max_rel_error']:.1e}"])
    return Table(header, rows)
