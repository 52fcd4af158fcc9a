"""Benchmarks of :func:`lipnb.local_lipschitz` against the paper's method (App. E.1, the loop as intended is
:func:`lipnb.paper.published.paper_power_iteration`): the recorded runs (where they live, how to read them as
typed records, how to tabulate them).

``bench/lipschitz.py``, ``bench/workloads.py`` and ``bench/paper_profile.py`` (in the repository) write one JSON
record per run. The records committed with lipnb ship inside the package (``lipnb/experiments/benchmark_records/``),
so they are found after any install; the environment variable ``LIPNB_BENCH_DIR`` names another folder to read and
write instead.
:func:`benchmark_record` reads one as a typed record of :mod:`lipnb.experiments.benchmark_schema`.
"""

from __future__ import annotations

import html
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path

from ..models.titles import model_title
from ..words import counted
from .benchmark_schema import (
    CallResult,
    LipschitzRecord,
    LipschitzRun,
    PaperProfileRecord,
    Speedup,
    WorkloadRecord,
    WorkloadRun,
)

__all__ = [
    "METHOD_LABELS",
    "PAPER_BASELINES",
    "PEER_TITLES",
    "PeerComparison",
    "benchmark_provenance",
    "benchmark_record",
    "benchmark_table",
    "cpu_speedup",
    "default_call",
    "error_percent",
    "lipnb_calls",
    "paper_profile_seconds",
    "peer_comparisons",
    "record_path",
    "relative_errors",
    "speedup_decomposition",
    "workload_name",
    "workload_parts",
]

_ENV_VAR = "LIPNB_BENCH_DIR"

# A method's name in a reader's table: the book's estimator in words, never the package's name.
METHOD_LABELS = {"paper": "paper's loop", "lipnb": "book's estimator",
                 "lipnb-f32": "book's estimator, no bfloat16 presolve",
                 "lipnb-tight": "book's estimator, tolerance 10⁻⁶",
                 "lipnb-autograd": "book's estimator, autograd products",
                 "lipnb-f64": "book's estimator, float64 products"}


# The maps of the records, named in words (a reader's table never shows a map kind; models: `model_title`).
_KIND_NAMES = {"self": "self-attention module", "mha": "multi-head map", "block": "attention sub-layer"}

# The paper's loop in ``bench/workloads.py``'s records: as published, and stopped by an oracle at 1e-4 of the reference.
PAPER_BASELINES = ("paper", "paper-oracle")


def _records_dir() -> Path:
    """The folder of benchmark records: ``$LIPNB_BENCH_DIR`` when set, else the records shipped with lipnb."""
    folder = os.environ.get(_ENV_VAR)
    return Path(folder) if folder else Path(__file__).resolve().parent / "benchmark_records"


def record_path(name: str) -> Path:
    """Where the record ``name`` (e.g. ``"lipschitz-cpu"``) is read and written."""
    return _records_dir() / f"{name}.json"


def benchmark_record(name: str | Path) -> LipschitzRecord | WorkloadRecord | PaperProfileRecord | None:
    """A recorded benchmark by name (or path), or ``None`` when it was never recorded: a :class:`WorkloadRecord`
    when it lists the ``calls`` it timed (``bench/workloads.py``), a :class:`PaperProfileRecord` when it names
    the ``profile`` it timed (``bench/paper_profile.py``), else a :class:`LipschitzRecord`."""
    path = Path(name) if isinstance(name, Path) else record_path(name)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    kind = LipschitzRecord
    if isinstance(data, dict) and "calls" in data:
        kind = WorkloadRecord
    elif isinstance(data, dict) and "profile" in data:
        kind = PaperProfileRecord
    return kind.from_json(data, path.name)


def paper_profile_seconds(record: PaperProfileRecord) -> dict[str, float]:
    """A :class:`PaperProfileRecord` summed by kind of sweep: ``"<kind>"`` the wall seconds of the sweeps of that
    kind that ran, ``"<kind> per sweep"`` their mean, ``"<kind> ran"`` and ``"<kind> sweeps"`` how many ran and
    how many the profile has, and ``"total"`` the measured seconds plus each kind's mean for every sweep that did
    not run (an extrapolation wherever a kind's sweeps did not all run)."""
    kinds: dict[str, list] = {}
    for run in record.runs:
        kinds.setdefault(run.sweep.split()[0], []).append(run)
    out, total = {}, 0.0
    for kind, runs in kinds.items():
        walls = [run.wall_s for run in runs if run.ran]
        if not walls:
            raise ValueError(f"no {kind} sweep ran in the record: nothing to extrapolate from")
        out |= {kind: sum(walls), f"{kind} per sweep": sum(walls) / len(walls), f"{kind} ran": len(walls),
                f"{kind} sweeps": len(runs)}
        total += sum(walls) / len(walls) * len(runs)
    return out | {"total": total}


def relative_errors(values: typing.Sequence[float], ref: typing.Sequence[float]) -> list[float]:
    """``|v - r| / r`` for each estimate ``v`` and reference ``r``."""
    return [abs(v - r) / r for v, r in zip(values, ref, strict=True)]


def default_call(run: LipschitzRun | WorkloadRun) -> str:
    """The run's entry for ``local_lipschitz(f, X)`` with its defaults: ``"default"`` where the run has one,
    else its first method that is not one of the paper's loops."""
    if "default" in run.methods:
        return "default"
    return next(method for method in run.methods if not method.startswith("paper"))


def lipnb_calls(run: WorkloadRun) -> dict[str, CallResult]:
    """The ``local_lipschitz`` calls of one run of ``bench/workloads.py``'s record (all but the paper's loops)."""
    return {method: entry for method, entry in run.methods.items() if method not in PAPER_BASELINES}


# The peers ``bench/peers.py`` times, named as a reader meets them.
PEER_TITLES = {"svds": "ARPACK", "lobpcg": "LOBPCG"}  # both through SciPy


@dataclass(frozen=True)
class PeerComparison:
    """One workload's default call against the peers a user would call instead (``bench/peers.py``), read from
    the record: median CPU seconds, the speedup recomputed from them beside the one the record states, each
    peer's largest relative error and the inputs its own stopping test left unconverged."""

    workload: str
    default_cpu: float
    peer_cpu: dict[str, float]
    speedup: dict[str, float]
    recorded_speedup: dict[str, float]
    max_rel_error: dict[str, float]
    unconverged: dict[str, int]


def peer_comparisons(record: WorkloadRecord) -> list[PeerComparison]:
    """Every workload of ``record`` against its peers; ``ValueError`` where a workload timed other peers than
    :data:`PEER_TITLES` (a record made before ``bench/peers.py``)."""
    if not isinstance(record, WorkloadRecord):
        raise TypeError(f"peer_comparisons: a WorkloadRecord, not {type(record).__name__}")
    out = []
    for run in record.runs:
        peers = run.peers or {}
        if sorted(peers) != sorted(PEER_TITLES) or not run.default_call.cpu_vs_peers:
            raise ValueError(f"{workload_name(run, short=True)}: the record holds the peers {sorted(peers)}, not "
                             f"{sorted(PEER_TITLES)}; retake it with bench/workloads.py")
        ours = run.methods[default_call(run)].cpu.median
        out.append(PeerComparison(
            workload=workload_name(run, short=True), default_cpu=ours,
            peer_cpu={name: peers[name].cpu.median for name in PEER_TITLES},
            speedup={name: peers[name].cpu.median / ours for name in PEER_TITLES},
            recorded_speedup={name: run.default_call.cpu_vs_peers[name] for name in PEER_TITLES},
            max_rel_error={name: peers[name].max_rel_error for name in PEER_TITLES},
            unconverged={name: run.batch - peers[name].converged for name in PEER_TITLES}))
    return out


def workload_name(run: WorkloadRun, short: bool = False) -> str:
    """A workload of ``bench/workloads.py``'s record named by what it is, one noun phrase with the title in Markdown
    italics as a check's claim or a table sets it: "MiniLM layer 2 with 32 windows of *Alice* of *n* = 128 tokens
    (one thread)" (``short``, plain text for the prose: "MiniLM layer 2, one thread")."""
    threads = counted(run.threads, "thread")
    layer = f"{model_title(run.model)} layer {run.layer}"
    if short:
        return f"{layer}, {threads}"
    return f"{layer} with {run.batch} windows of *Alice* of *n* = {run.n} tokens ({threads})"


def workload_parts(run: WorkloadRun) -> tuple[str, str]:
    """A workload's layer and threads apart, for a sentence to name each: ("MiniLM's layer 2", "one thread")."""
    return f"{model_title(run.model)}'s layer {run.layer}", counted(run.threads, "thread")


def benchmark_provenance(record: LipschitzRecord) -> str:
    """One line: when, where and with what the benchmark ran (the commit is in the record, not in the line a reader
    sees)."""
    versions = record.versions
    return (f"{record.date[:10]}, {record.device_name} ({record.device}, {record.threads} threads, "
            f"load average {record.load_average.start[0]}), torch {versions.torch}, lipnb "
            f"{versions.lipnb}, matrix-product peaks "
            + ", ".join(f"{dtype} {peak / 1e9:,.0f}" for dtype, peak in record.peak_flops_by_dtype.items())
            + " GFLOP/s")


def cpu_speedup(run: LipschitzRun, method: str = "lipnb") -> float | None:
    """The paper's median CPU time over ``method``'s: the speedup less sensitive to a shared machine's
    stolen time (both methods run on the same threads), ``None`` without the paper's method."""
    if "paper" not in run.methods or method == "paper":
        return None
    return run.methods["paper"].median_cpu_s / run.methods[method].median_cpu_s


def speedup_decomposition(run: LipschitzRun, method: str = "lipnb") -> dict[str, float]:
    """The CPU-time speedup of ``method`` over the paper's loop (:func:`cpu_speedup`) as (FLOPs per estimate ratio)
    x (FLOPs per CPU second ratio), the second factor being the first divided out of the speedup."""
    speedup = cpu_speedup(run, method)
    if speedup is None:
        raise ValueError(f"speedup_decomposition: the run needs the paper's loop and another method, not {method!r}")
    paper, ours = run.methods["paper"], run.methods[method]
    steps_ours = ours.mean_iterations + ours.mean_presolve_iterations
    flops_paper = paper.flops_per_product * paper.mean_iterations
    flops_ours = ours.flops_per_product * steps_ours + ours.flops_linearize
    flops = flops_paper / flops_ours
    return {"speedup": speedup, "flops_per_step": paper.flops_per_product / ours.flops_per_product,
            "steps": paper.mean_iterations / steps_ours, "flops": flops, "rate": speedup / flops}


@dataclass(frozen=True, repr=False)
class _Table:
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


def error_percent(error: float) -> str:
    """A relative error as a reader's percentage at two significant digits ("0.37%"); one below 0.01% is written
    "below 0.01%", the digits of rounding noise being no finding."""
    if not isinstance(error, (int, float)) or isinstance(error, bool):
        raise TypeError(f"error_percent: error is a real number, not {type(error).__name__}")
    if not error >= 0:
        raise ValueError(f"error_percent: a relative error is at least 0, not {error}")
    if 100 * error < 0.01:
        return "below 0.01%"
    return f"{100 * error:.2g}%"


def _steps(mean: float, presolved: float | None) -> str:
    """Mean products per estimate, with the bfloat16 presolve's in parentheses when there were any."""
    return f"{mean:.1f}" + (f" (+ {presolved:.1f})" if presolved else "")


def benchmark_table(record: LipschitzRecord) -> list[dict[str, str]]:
    """The rows of a :class:`LipschitzRecord` for a reader's table, one per (map, length, method), headers in words:
    milliseconds per estimate and speedup over the paper's loop (in CPU time on a CPU record, in wall-clock time on
    a GPU one, whose CPU time is the host's: the caption says which), products per estimate (bfloat16 ones in
    parentheses), the fraction of the matrix-product peak, the call's peak memory (the paper's loop holds one input
    at a time, a batched method the whole batch), the largest relative error and how many inputs converged."""
    cpu = record.device == "cpu"
    rows = []
    for run in record.runs:
        for method, v in run.methods.items():
            per_input = v.median_cpu_s / run.batch if cpu else v.per_input_s
            speedup = cpu_speedup(run, method) if cpu else run.speedup.get(method)
            rows.append({
                "map": f"{model_title(run.model)} layer {run.layer}, "
                       f"{_KIND_NAMES.get(run.kind, run.kind)}",
                "n": str(run.n),
                "method": METHOD_LABELS[method],
                # five significant digits: the shown times reproduce the shown speedups
                "ms per estimate": f"{1e3 * per_input:#.5g}",
                "speedup": "baseline" if method == "paper" else "" if speedup is None else f"{speedup:.1f}",
                "products (bfloat16 in parentheses)": _steps(v.mean_iterations, v.mean_presolve_iterations),
                "% of peak": f"{100 * v.fraction_of_peak:.0f}",
                "peak MiB": f"{v.peak_MiB:.1f}",
                "largest error": error_percent(v.max_rel_error),
                "converged": f"{v.converged} of {run.batch}",
            })
    return rows


def _ratio(speedup: Speedup | None) -> str:
    return "" if speedup is None else f"{speedup.wall:.1f}x ({speedup.cpu:.1f}x)"


def _workload_table(record: WorkloadRecord) -> _Table:
    """``bench/workloads.py``'s record, one line per (workload, call): median seconds [range] and speedups
    over the paper's loop (as published, and stopped by the oracle at 1e-4) in wall and CPU time, products per
    input and the time split (CPU)."""
    header = ["workload", "threads", "call", "wall s [range]", "CPU s [range]", "speedup wall (CPU)",
              "against the oracle-stopped loop", "first call (cold)", "products / input (bfloat16 in parentheses)",
              "linearise / products / solver (CPU)", "max rel. error"]
    rows = []
    for run in record.runs:
        for method, v in run.methods.items():
            split = v.split
            rows.append([f"{run.workload}: {run.model} L{run.layer}, n = {run.n}, {run.batch} inputs",
                         str(run.threads), method,
                         f"{v.wall.median:.2f} [{v.wall.min:.2f}-{v.wall.max:.2f}]",
                         f"{v.cpu.median:.2f} [{v.cpu.min:.2f}-{v.cpu.max:.2f}]",
                         _ratio(run.speedup.get(method)), _ratio(run.speedup_oracle.get(method)),
                         _ratio(run.speedup_cold.get(method)), _steps(v.mean_iterations, v.mean_presolve_iterations),
                         "" if split is None else " / ".join(f"{part / split.cpu_s:.0%}" for part in (
                             split.linearize_cpu_s, split.products_cpu_s, split.solver_cpu_s)),
                         f"{v.max_rel_error:.1e}"])
    return _Table(header, rows)
