"""Two workloads of ``lipnb.local_lipschitz`` against the paper's method, side by side in one run (issues 23, 32).

Both workloads are MiniLM's layer 2 (``attention_map(model, 2, kind="self")``, the ``BertSelfAttention``
module), n = 128, a batch of 32 runs of *Alice in Wonderland* taken where they enter the layer; they differ
in the threads and in the call that chapter 10 recorded:

``chapter-10`` (1 thread)
    the chapter's recorded setting (``bench/lipschitz.py --threads 1``), with its call ``tol=1e-4``;
``issue-23`` (2 threads)
    the issue's setting: the machine's 2 threads, ``local_lipschitz`` with its defaults.

On each, interleaved and repeated (``--repeats``, default 3; medians and ranges reported), through the
public API only:

``paper``      App. E.1 on the module, one input at a time (``lipnb.paper.published.paper_power_iteration``);
``paper-oracle`` the same loop stopped at the first step within 1e-4 of the reference (an oracle no user
               has: the cheapest the paper's loop can be at lipnb's accuracy, where its own test stops early);
``default``    ``local_lipschitz(f, X)``: stop once ``error ≤ 1e-4`` (the value within 1e-4 of the nearest
               singular value, of the norm under the Krylov premise), bfloat16 presolve where native, the final
               residual recomputed with a float64 product;
``tol-1e-4``   ``local_lipschitz(f, X, tol=1e-4)`` (chapter 10's recorded call: relative residual 1e-4);
``rtol-1e-4``  ``local_lipschitz(f, X, rtol=1e-4)``: the default's test asked for explicitly (recorded under
               this name since the call with ``start="shared"`` that it named before was withdrawn: a shared
               start could converge to a lower singular value);
``float32-premise`` the default call on the map with its float64 evaluation hidden (:class:`Float32Only`): no
               float64 product, the certificate rests on a premise about float32 rounding instead. Not a call to
               make; its time against ``default``'s is what the sound certificate costs.

Beside them, in the same run and interleaved with them, ``peers``: what a user would call instead
(``bench/peers.py``), SciPy's ``svds`` (ARPACK) and ``lobpcg`` on a ``LinearOperator`` whose products are
``torch.func.jvp``/``vjp`` of the module, one input at a time, each checked against the reference.

Each row also gets ``default_call``: the default call's CPU-time ratio against the paper's loop as published,
against the oracle-stopped loop (the ratio at equal accuracy: that loop stops at its first step within 1e-4 of the
reference), the one that counts (the oracle-stopped loop where the published one ends more than 1e-4 from the
reference), against each peer (``cpu_vs_peers``, with their largest errors), and the share of the default call's
CPU time spent in ``JᵀJ`` products.

Timing: as a process runs one call after another, the freed memory kept by the allocator (no ``malloc_trim``
before a timed call); each lipnb call is also timed ``cold``, right after ``malloc_trim`` has returned the freed
memory to the system, so that it pays the page faults of a first call (its batch-sized tensors touch fresh pages;
the paper's loop works on one input at a time and barely notices).

Accuracy: every estimate against a float64 reference (``bench/lipschitz.py``'s: ARPACK on the closed form,
certified on the float64 module). Time split of each lipnb call (an untimed twin run with timers around
``lipnb.core.linearization.linearize`` and the ``JᵀJ`` products): linearise / products / solver (the rest), wall
and CPU. Product cost: one batched ``JᵀJ`` product against one forward pass of the module on the batch.
``--models`` adds other layers (e.g. ``gpt2-random:6``, ``smollm2:3``), on the issue's workload only.

Usage::

    python bench/workloads.py                      # both workloads on MiniLM, about 2 min on a quiet 2-core CPU
    python bench/workloads.py --models minilm:2 gpt2-random:6 smollm2:3   # the record (about 30 min)
    python bench/workloads.py --models smollm2:3 --workloads chapter-10 --out /tmp/one-thread.json

Writes ``lipnb.experiments.benchmark.record_path("lipschitz-cpu-workloads")`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

import lipnb
from lipnb import data, models
from lipnb.core import krylov
from lipnb.core import linearization as linearization_module
from lipnb.core import lipschitz as lipschitz_module
from lipnb.experiments import benchmark
from lipnb.models import llama
from lipnb.paper import published

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_lipschitz", Path(__file__).with_name("lipschitz.py"))
core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core)
_spec = importlib.util.spec_from_file_location("bench_peers", Path(__file__).with_name("peers.py"))
peers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(peers)

CALLS: dict[str, dict] = {"default": {}, "tol-1e-4": {"tol": 1e-4}, "rtol-1e-4": {"rtol": 1e-4},
                          "float32-premise": {}}


class Float32Only:
    """The map with its float64 evaluation hidden (it refuses float64 inputs): ``local_lipschitz`` then cannot
    recompute the residual with a float64 product and certifies under the premise that float32 products are exact
    to ``FLOAT32_ULPS`` units in the last place. What the float64 certificate costs is the time between the two."""

    def __init__(self, fn: models.LayerMap) -> None:
        self.fn = fn

    def __call__(self, X: Tensor) -> Tensor:
        return self.fn(X)

    def linearize(self, X: Tensor) -> object:
        if X.dtype != torch.float32:
            raise TypeError(f"this map runs in float32 only (got {X.dtype})")
        return self.fn.linearize(X)


# The calls of CALLS made on another map than the layer's own: name -> (what the record says, the map).
MAPS: dict[str, tuple[str, Callable]] = {"float32-premise": ("the map without its float64 evaluation", Float32Only)}


def call_map(method: str, f: models.LayerMap) -> Callable:
    """The map ``method`` is called on: the layer's own, or the one :data:`MAPS` makes of it."""
    return MAPS[method][1](f) if method in MAPS else f


def recorded_options(method: str) -> dict[str, str]:
    """What the record says of the call ``method``: its options as text, and its map where :data:`MAPS` names one."""
    return {k: str(v) for k, v in CALLS[method].items()} | ({"map": MAPS[method][0]} if method in MAPS else {})
ORACLE_MAX_ITER = 1000
WORKLOADS = {"chapter-10": 1, "issue-23": 2}          # name: threads


def _low_precision(normal: krylov.NormalOperator, u: Tensor, low: bool = False) -> bool:
    """Whether the product ``normal(u, low)`` runs in bfloat16 or float16 (the presolve, the relaxed steps)."""
    return (normal.low if low else normal.lin).output.dtype in (torch.bfloat16, torch.float16)


class Split:
    """Timers around linearisation and the ``JᵀJ`` products of one ``local_lipschitz`` call (wall, CPU); of the
    products, those in bfloat16 or float16 (``low``) are also timed apart."""

    def __init__(self) -> None:
        self.totals = {"linearize": [0.0, 0.0], "products": [0.0, 0.0], "low": [0.0, 0.0]}
        self.products = {"products": 0, "low": 0}

    def _wrap(self, part: str, fn: Callable) -> Callable:
        def timed_call(*args: object, **kwargs: object) -> object:
            wall, cpu = time.perf_counter(), time.process_time()
            out = fn(*args, **kwargs)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            parts = [part, "low"] if part == "products" and _low_precision(*args, **kwargs) else [part]
            for name in parts:
                self.totals[name][0] += wall
                self.totals[name][1] += cpu
                if name in self.products:
                    self.products[name] += len(args[1])
            return out
        return timed_call

    def run(self, fn: Callable, X: Tensor, options: dict) -> dict:
        # linearize lives in lipnb.core.linearization and the estimator imports it: calls through either name count.
        linearize, call = linearization_module.linearize, krylov.NormalOperator.__call__
        timed = self._wrap("linearize", linearize)
        lipschitz_module.linearize = linearization_module.linearize = timed
        krylov.NormalOperator.__call__ = self._wrap("products", call)
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            lipnb.local_lipschitz(fn, X, **options)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            lipschitz_module.linearize = linearization_module.linearize = linearize
            krylov.NormalOperator.__call__ = call
        lin, prod, low = self.totals["linearize"], self.totals["products"], self.totals["low"]
        return {"wall_s": wall, "cpu_s": cpu, "linearize_wall_s": lin[0], "linearize_cpu_s": lin[1],
                "products_wall_s": prod[0], "products_cpu_s": prod[1],
                "solver_wall_s": wall - lin[0] - prod[0], "solver_cpu_s": cpu - lin[1] - prod[1],
                "products_per_input": self.products["products"] / len(X),
                "low_products_wall_s": low[0], "low_products_cpu_s": low[1],
                "low_products_per_input": self.products["low"] / len(X)}


def product_cost(f: models.LayerMap, module: Callable, X: Tensor, repeats: int = 5) -> dict[str, float]:
    """Best-of-``repeats`` wall and CPU seconds of a forward pass of the module, a linearisation and one
    ``JᵀJ`` product, each on the whole batch."""
    u = torch.randn(X.shape, generator=torch.Generator().manual_seed(0), dtype=X.dtype)
    lin = f.linearize(X)
    jobs = {"forward": lambda: module(X), "linearize": lambda: f.linearize(X), "product": lambda: lin.vjp(lin.jvp(u))}
    out = {}
    with torch.no_grad():
        for name, job in jobs.items():
            best = (float("inf"), float("inf"))
            for _ in range(repeats):
                wall, cpu = time.perf_counter(), time.process_time()
                job()
                best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
            out[f"{name}_wall_s"], out[f"{name}_cpu_s"] = best
    return out


def clock(job: Callable[[], dict], cold: bool = False) -> tuple[dict, float, float]:
    """``(result, wall s, CPU s)`` of one call; ``cold``: after handing the allocator's free memory back."""
    if cold:
        core.release_heap()
    wall, cpu = time.perf_counter(), time.process_time()
    result = job()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratios(paper: dict, ours: dict, ranges: bool = True) -> dict[str, float | list[float]]:
    """The paper's median time over ours, wall and CPU; with ``ranges``, the least and most favourable pairings."""
    out: dict[str, float | list[float]] = {key: paper[key]["median"] / ours[key]["median"] for key in ("wall", "cpu")}
    if ranges:
        out |= {f"{key}_range": [paper[key]["min"] / ours[key]["max"], paper[key]["max"] / ours[key]["min"]]
                for key in ("wall", "cpu")}
    return out


def bench(spec: str, workloads: dict[str, int], n: int, B: int, repeats: int, log: Callable[[str], None],
          with_peers: bool = True) -> list[dict]:
    name, layer = spec.split(":")
    layer = int(layer)
    model, tokenizer = models.load(name, device="cpu")
    ids = data.token_sequences(data.alice_text(), tokenizer, [n], B)[n]
    f = models.attention_map(model, layer, "self")
    # The paper's loop differentiates the model's own module: a LayerMap runs it when called; a Llama map is
    # lipnb's closed form, so the baseline calls transformers' LlamaAttention (llama.module_map) instead.
    module = llama.module_map(model, layer) if llama.is_llama(model) else f
    X = models.attention_inputs(model, layer, ids, kind="self")
    t0 = time.perf_counter()
    ref = core.reference(models.attention_map(copy.deepcopy(model).double(), layer, "self"), X)
    log(f"\n{name} layer {layer}, n = {n}, batch {B}, d = {X.shape[-1]}: reference in {time.perf_counter() - t0:.0f} s"
        f" (module residual {max(ref['module_residual']):.0e})")
    rows = []
    for workload, threads in workloads.items():
        torch.set_num_threads(threads)
        methods = [*benchmark.PAPER_BASELINES, *CALLS, *(peers.PEERS if with_peers else ())]
        times: dict[str, dict[str, list]] = {m: {"wall": [], "cpu": [], "cold_wall": [], "cold_cpu": []}
                                             for m in methods}
        values: dict[str, list[float]] = {}
        paper_runs: dict[str, dict[str, list]] = {}
        for rep in range(repeats):
            for method in methods[rep % len(methods):] + methods[: rep % len(methods)]:
                if method == "paper":
                    job = lambda: core.run_paper(module, X)                   # noqa: E731
                elif method == "paper-oracle":
                    job = lambda: core.run_paper(module, X, ref["values"], ORACLE_MAX_ITER)   # noqa: E731
                elif method in peers.PEERS:
                    job = lambda method=method: peers.run_peer(method, module, X)     # noqa: E731
                else:
                    job = lambda method=method: core.run_lipnb(call_map(method, f), X,  # noqa: E731
                                                               **CALLS[method])
                result, wall, cpu = clock(job)
                times[method]["wall"].append(wall)
                times[method]["cpu"].append(cpu)
                if method in CALLS:
                    _, wall, cpu = clock(job, cold=True)
                    times[method]["cold_wall"].append(wall)
                    times[method]["cold_cpu"].append(cpu)
                values[method] = result["values"]
                if method not in CALLS:
                    paper_runs[method] = result
        row = {"workload": workload, "threads": threads, "model": name, "layer": layer, "n": n, "batch": B,
               "d": int(X.shape[-1]), "reference": ref["values"], "cost": product_cost(f, module, X), "methods": {},
               "peers": {}}
        for method in methods:
            errors = benchmark.relative_errors(values[method], ref["values"])
            entry = {"wall_s": times[method]["wall"], "cpu_s": times[method]["cpu"],
                     "wall": summary(times[method]["wall"]), "cpu": summary(times[method]["cpu"]),
                     "max_rel_error": max(errors), "values": values[method]}
            if method not in CALLS:
                entry |= {"mean_iterations": sum(paper_runs[method]["iterations"]) / B,
                          "converged": sum(paper_runs[method]["converged"])}
            else:
                detail = lipnb.local_lipschitz(call_map(method, f), X, detailed=True, **CALLS[method])
                entry |= {"cold_wall_s": times[method]["cold_wall"], "cold_cpu_s": times[method]["cold_cpu"],
                          "cold": {key: summary(times[method][f"cold_{key}"]) for key in ("wall", "cpu")},
                          "options": recorded_options(method),
                          "mean_iterations": float(detail.iterations.double().mean()),
                          "mean_presolve_iterations": float(detail.presolve_iterations.double().mean()),
                          "converged": int(detail.converged.sum()), "max_error_bound": float(detail.error.max()),
                          "split": Split().run(call_map(method, f), X, CALLS[method])}
            row["peers" if method in peers.PEERS else "methods"][method] = entry
        paper, oracle = row["methods"]["paper"], row["methods"]["paper-oracle"]
        calls = {m: row["methods"][m] for m in CALLS}
        row["speedup"] = {m: ratios(paper, v) for m, v in calls.items()}
        row["speedup_oracle"] = {m: ratios(oracle, v) for m, v in calls.items()}
        row["speedup_cold"] = {m: ratios(paper, v["cold"], ranges=False) for m, v in calls.items()}
        row["default_call"] = default_call(row)
        log_row(row, log)
        rows.append(row)
    return rows


def default_call(row: dict) -> dict[str, float | str]:
    """The default call's CPU-time ratios: against the paper's loop as published, against the oracle-stopped loop,
    and the one that counts (published where it ends within 1e-4 of the reference, else oracle-stopped)."""
    published, oracle = row["speedup"]["default"]["cpu"], row["speedup_oracle"]["default"]["cpu"]
    off = row["methods"]["paper"]["max_rel_error"]
    split = row["methods"]["default"]["split"]
    ours = row["methods"]["default"]["cpu"]["median"]
    return {"cpu_vs_paper": published, "cpu_vs_oracle": oracle, "paper_max_rel_error": off,
            "baseline": "paper" if off <= 1e-4 else "paper-oracle", "cpu_ratio": published if off <= 1e-4 else oracle,
            "products_cpu_share": split["products_cpu_s"] / split["cpu_s"],
            "cpu_vs_peers": {m: v["cpu"]["median"] / ours for m, v in row["peers"].items()},
            "peers_max_rel_error": {m: v["max_rel_error"] for m, v in row["peers"].items()}}


def log_row(row: dict, log: Callable[[str], None]) -> None:
    cost = row["cost"]
    log(f"\n[{row['workload']}] {row['model']} L{row['layer']}, {row['threads']} thread(s): forward "
        f"{1e3 * cost['forward_wall_s']:.0f} ms, linearize {1e3 * cost['linearize_wall_s']:.0f} ms, one JᵀJ product "
        f"{1e3 * cost['product_wall_s']:.0f} ms ({cost['product_cpu_s'] / cost['forward_cpu_s']:.2f} forward passes"
        " in CPU time)")
    for method, v in row["methods"].items():
        line = (f"  {method:10} wall {v['wall']['median']:6.2f} s [{v['wall']['min']:.2f}-{v['wall']['max']:.2f}]  "
                f"cpu {v['cpu']['median']:6.2f} s [{v['cpu']['min']:.2f}-{v['cpu']['max']:.2f}]  "
                f"steps {v['mean_iterations']:5.2f}  max err {v['max_rel_error']:.1e}")
        if method in CALLS:
            s, r, o, c = v["split"], row["speedup"][method], row["speedup_oracle"][method], row["speedup_cold"][method]
            line += (f" (bound {v['max_error_bound']:.1e}, conv {v['converged']}/{row['batch']})  "
                     f"speedup wall {r['wall']:4.1f}x [{r['wall_range'][0]:.1f}-{r['wall_range'][1]:.1f}] "
                     f"cpu {r['cpu']:4.1f}x [{r['cpu_range'][0]:.1f}-{r['cpu_range'][1]:.1f}] (oracle-stopped: "
                     f"wall {o['wall']:4.1f}x cpu {o['cpu']:4.1f}x; cold call: wall {c['wall']:4.1f}x "
                     f"cpu {c['cpu']:4.1f}x)  split (cpu) "
                     f"linearize {s['linearize_cpu_s'] / s['cpu_s']:.0%} "
                     f"products {s['products_cpu_s'] / s['cpu_s']:.0%} solver {s['solver_cpu_s'] / s['cpu_s']:.0%}")
        log(line)
    for method, v in row["peers"].items():
        log(f"  {method:10} wall {v['wall']['median']:6.2f} s [{v['wall']['min']:.2f}-{v['wall']['max']:.2f}]  "
            f"cpu {v['cpu']['median']:6.2f} s [{v['cpu']['min']:.2f}-{v['cpu']['max']:.2f}]  "
            f"steps {v['mean_iterations']:5.2f}  max err {v['max_rel_error']:.1e} "
            f"(conv {v['converged']}/{row['batch']})")
    d = row["default_call"]
    peer_ratios = ", ".join(f"{m} {r:.1f}x (max err {d['peers_max_rel_error'][m]:.0e})"
                            for m, r in d["cpu_vs_peers"].items())
    log(f"  default call: {d['cpu_ratio']:.1f}x the {d['baseline']} loop in CPU time (published loop "
        f"{d['cpu_vs_paper']:.1f}x, at equal accuracy (the loop stopped within 1e-4 of the reference) "
        f"{d['cpu_vs_oracle']:.1f}x{'; ' + peer_ratios if peer_ratios else ''}); products "
        f"{d['products_cpu_share']:.0%} of its CPU time")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["minilm:2"],
                        help="model:layer specs; the first gets both workloads, the others the issue's")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=None,
                        help="run only these workloads, on every model (default: both on the first model, the "
                             "issue's on the others)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-peers", action="store_true", help="skip SciPy's svds and lobpcg (bench/peers.py)")
    args = parser.parse_args(argv)
    os.environ.setdefault("LIPNB_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    out = args.out or benchmark.record_path("lipschitz-cpu-workloads")

    def log(line: str) -> None:
        print(line, flush=True)

    started, commit, load_start = dt.datetime.now(dt.timezone.utc), core.git_commit(), core.load_average()
    log(f"{core.device_name(torch.device('cpu'))}, load {load_start}, torch {torch.__version__}, git {commit}")
    rows = []
    for i, spec in enumerate(args.models):
        chosen = {w: WORKLOADS[w] for w in args.workloads} if args.workloads else \
            WORKLOADS if i == 0 else {"issue-23": WORKLOADS["issue-23"]}
        rows += bench(spec, chosen, args.n, args.batch, args.repeats, log, with_peers=not args.no_peers)
    record = {
        "schema": 1,
        "benchmark": "local Lipschitz constants on two workloads: the paper's loop vs lipnb.local_lipschitz calls",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
        "device": "cpu", "device_name": core.device_name(torch.device("cpu")),
        "threads": {w: WORKLOADS[w] for w in {row["workload"] for row in rows}},
        "load_average": {"start": load_start, "end": core.load_average()},
        "versions": core.versions(commit),
        "command": "python bench/workloads.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "calls": {m: recorded_options(m) for m in CALLS},
        "paper_method": {"tol": published.PAPER_TOL, "max_iter": published.PAPER_MAX_ITER, "dtype": "float32",
                         "oracle": {"rtol": 1e-4, "max_iter": ORACLE_MAX_ITER}},
        "runs": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    log(f"\nwrote {out} ({record['duration_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
