"""How fast is ``lipnb.local_lipschitz``? The paper's method and ours, side by side, on the same inputs.

For each sequence length ``n`` the inputs are ``batch`` runs of ``n`` consecutive tokens of *Alice in
Wonderland*, taken where they enter the attention layer of a real model (``lipnb.models.attention_inputs``).
On these inputs, in one process, interleaved and repeated (medians reported):

``paper``
    App. E.1 as the paper runs it: one input at a time, in float32, through the Hugging Face module
    (calling ``attention_map(model, layer, kind)`` runs it); each step a ``torch.func.jvp`` and a
    ``torch.func.vjp`` (both re-running the forward pass), then ``u <- JᵀJu / ||JᵀJu||``; stop when the
    estimate of ``||J||²`` moves by less than ``1e-4``, at most 100 steps.
``lipnb``
    ``lipnb.local_lipschitz(attention_map(model, layer, kind), X, tol=1e-4)``, as a user calls it: the
    map's closed-form products (Lemma C.2, with LayerNorm and the residual for ``kind="block"``; equal
    to the module in tests/models/test_models.py) with ``tol=1e-4``: the relative residual of ``σ²``
    at most ``1e-4``, so ``σ`` within ``5e-5`` of the singular value it approximates, the accuracy the
    issue asks of both methods. Default ``presolve="auto"``: bfloat16 starting vectors where the device
    multiplies bfloat16 natively. Timed as a user calls it, values only (the paper's method returns
    nothing more); the iteration counts come from the same deterministic run with ``detailed=True``
    (which adds a JVP per input for the left singular vector), untimed and checked to agree.
``lipnb-f32`` (full runs)
    as ``lipnb`` without the bfloat16 presolve: what the presolve buys.
``lipnb-tight`` (full runs)
    ``lipnb.local_lipschitz`` with ``tol=1e-6`` (the default before the default became ``rtol=1e-4``).
``lipnb-autograd`` (full runs)
    as ``lipnb`` on ``lambda X: f(X)``, which hides the closed form: autograd through the Hugging Face
    module (double-backward linearization; no presolve).
``lipnb-f64`` (full runs)
    as ``lipnb`` with float64 products (``dtype=torch.float64`` on the map's ``closed_form()``).

Accuracy: every estimate is compared with a tightly converged reference, float64 ARPACK Lanczos
(``scipy.sparse.linalg.eigsh``, tol 1e-12) on the closed-form float64 products, certified on the
float64 Hugging Face module by the Rayleigh quotient and residual of the returned vector.
Cost: FLOPs per Jacobian product counted by ``torch.utils.flop_counter`` on one input; the time the
counted FLOPs would take at the peak of a large matrix product timed in the same run (for the dtypes
the run used: float32, float64 when timed, bfloat16 only when a presolve ran), as a fraction of the
measured time; the time of one forward pass of the module on the batch; peak memory per input.

Usage::

    python bench/lipschitz.py                 # full: n = 32, 128, 512 (batch 32; 8 at n = 512 on CPU)
    python bench/lipschitz.py --quick         # about 1 min on a 2-core CPU: n = 16, 32, batch 3
    python bench/lipschitz.py --n 64 256 --batch 16 --device cuda --models minilm:2 gpt2-random:6

Results go to ``lipnb.experiments.benchmark.record_path("lipschitz-<device>[-quick]")`` (the records shipped with
lipnb, or ``$LIPNB_BENCH_DIR``; ``--out`` to change).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, eigsh
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

import lipnb
from lipnb import data, models, profiles
from lipnb.core.lipschitz import NotConvergedWarning
from lipnb.experiments import benchmark
from lipnb.models import llama
from lipnb.paper import published

ROOT = Path(__file__).resolve().parents[1]
LIPNB_TOL = 1e-4
Map = Callable[[Tensor], Tensor]


# --------------------------------------------------------------------------- the methods


def run_paper(fn: Map, X: Tensor, targets: list[float] | None = None, max_iter: int = published.PAPER_MAX_ITER
              ) -> dict[str, list]:
    """The paper's loop on each input; with ``targets``, stopped by the oracle at 1e-4 of them."""
    values, iterations = [], []
    for i in range(len(X)):
        value, steps = published.paper_power_iteration(fn, X[i:i + 1], seed=i, max_iter=max_iter,
                                                       target=None if targets is None else targets[i])
        values.append(value)
        iterations.append(steps)
    return {"values": values, "iterations": iterations, "converged": [s < max_iter for s in iterations]}


def run_lipnb(fn: Map, X: Tensor, detailed: bool = False, **options: object) -> dict[str, list]:
    """``lipnb.local_lipschitz`` as a user calls it (values only, like the paper's method); with
    ``detailed``, the same deterministic run with its iteration counts (untimed: it adds a JVP per input)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        res = lipnb.local_lipschitz(fn, X, detailed=detailed, **options)
    if not detailed:
        return {"values": res.double().tolist()}
    return {"values": res.value.double().tolist(), "iterations": res.iterations.tolist(),
            "presolve_iterations": res.presolve_iterations.tolist(), "converged": res.converged.tolist()}


# --------------------------------------------------------------------------- reference values


def reference(map64: models.LayerMap, X: Tensor) -> dict[str, list]:
    """Float64 ARPACK Lanczos (tol 1e-12) per input on the closed-form products, certified on the float64
    module (what calling ``map64`` runs)."""
    values, agreement, residuals, products = [], [], [], []
    X64 = X.double()
    for i in range(len(X64)):
        x = X64[i:i + 1]
        lin = map64.linearize(x)
        count = [0]

        def matvec(v: np.ndarray, lin=lin, x=x, count=count) -> np.ndarray:
            count[0] += 1
            u = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64)).to(x.device).view_as(x)
            return lin.vjp(lin.jvp(u)).reshape(-1).cpu().numpy()

        N = x.numel()
        op = LinearOperator((N, N), matvec=matvec, dtype=np.float64)
        v0 = np.random.default_rng(i).standard_normal(N)
        lam, vec = eigsh(op, k=1, which="LA", tol=1e-12, v0=v0, ncv=min(N - 1, 24))
        lam = float(lam[0])
        u = torch.from_numpy(vec[:, 0].copy()).to(x.device).view_as(x)
        _, Ju = torch.func.jvp(map64, (x,), (u,))
        _, pullback = torch.func.vjp(map64, x)
        (JtJu,) = pullback(Ju)
        theta = float(Ju.square().sum())
        values.append(lam ** 0.5)
        agreement.append(abs(theta - lam) / lam)
        residuals.append(float((JtJu - theta * u).norm()) / theta)
        products.append(count[0])
    return {"values": values, "module_rayleigh_gap": agreement, "module_residual": residuals,
            "arpack_products": products}


# --------------------------------------------------------------------------- measurement helpers


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc: peak memory on CPU is then reported as NaN
    _LIBC = None


def release_heap() -> bool:
    """Hand the allocator's free memory back to the system (glibc's ``malloc_trim``); ``False`` without glibc."""
    if _LIBC is None:
        return False
    _LIBC.malloc_trim(0)
    return True


def _rss_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


@contextlib.contextmanager
def peak_memory(device: torch.device) -> Iterator[dict[str, float]]:
    """Peak memory above the level at entry, in MiB: CUDA allocator peak, or peak RSS on CPU (Linux)."""
    out: dict[str, float] = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        yield out
        torch.cuda.synchronize(device)
        out["MiB"] = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        return
    try:
        if not release_heap():                                  # hand freed memory back, so RSS is what is in use
            raise OSError("no glibc")
        Path("/proc/self/clear_refs").write_text("5")          # reset the peak RSS (VmHWM)
        base = _rss_kib("VmRSS")
    except OSError:
        yield out
        out["MiB"] = float("nan")
        return
    yield out
    out["MiB"] = (_rss_kib("VmHWM") - base) / 1024


def timed(fn: Callable[[], dict], device: torch.device) -> tuple[dict, float, float, float]:
    """``(result, wall seconds, CPU seconds, peak MiB)`` of one call."""
    with peak_memory(device) as memory:
        _sync(device)
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        _sync(device)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return result, wall, cpu, memory["MiB"]


def peak_flops(device: torch.device, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of a large square matrix product (best of several), the machine's practical peak."""
    size = 8192 if device.type == "cuda" else 1536
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(4):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


class _FlopCounter(TorchDispatchMode):
    """Matrix-product FLOPs by torch's own formulas (``torch.utils.flop_counter``), without its module
    tracker (which breaks ``torch.autograd.grad`` on leaves)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: object, types: object, args: tuple = (), kwargs: dict | None = None) -> object:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += int(formula(*args, **kwargs, out_val=out))
        return out


def count_flops(fn: Callable[[], object]) -> int:
    with _FlopCounter() as counter:
        fn()
    return counter.flops


def flops_per_product(method: str, fn: Map, x: Tensor) -> dict[str, int]:
    """FLOPs of one ``JᵀJ`` product (and of the linearization) on one input, counted by torch."""
    u = torch.randn_like(x)
    if method == "paper":
        def step() -> None:          # the ops of one step; torch.func.vjp itself trips the flop counter
            _, Ju = torch.func.jvp(fn, (x,), (u,))
            xg = x.detach().requires_grad_(True)
            with torch.enable_grad():
                torch.autograd.grad(fn(xg), xg, Ju)

        return {"product": count_flops(step), "linearize": 0}
    lin = lipnb.core.linearization.linearize(fn, x)
    return {"product": count_flops(lambda: lin.vjp(lin.jvp(u))),
            "linearize": count_flops(lambda: lipnb.core.linearization.linearize(fn, x))}


def load_average() -> list[float]:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        model = platform.processor() or "unknown CPU"
    return f"{model}, {os.cpu_count()} logical cores"


def versions(commit: str) -> dict[str, str]:
    """The versions a record names: Python, torch, transformers, lipnb and the git ``commit`` measured."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "lipnb": lipnb.__version__, "git": commit}


def git_commit() -> str:
    """The commit of the code measured, ``+dirty`` when lipnb/ or bench/*.py differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "-uno", "--", "lipnb", "bench/*.py")
        return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# --------------------------------------------------------------------------- the benchmark


def bench_model(spec: str, lengths: list[int], batch_for: Callable[[int], int], methods: list[str],
                repeats: int, device: torch.device, kinds: list[str], log: Callable[[str], None]) -> list[dict]:
    name, layer = spec.split(":")
    layer = int(layer)
    model, tokenizer = models.load(name, device=device)
    model64 = copy.deepcopy(model).double()
    batches = {n: batch_for(n) for n in lengths}
    ids = data.token_sequences(data.alice_text(), tokenizer, lengths, max(batches.values()))
    rows = []
    for kind in kinds:
        f = models.attention_map(model, layer, kind)
        map64 = models.attention_map(model64, layer, kind)
        # A LayerMap runs the model's module and has a closed form; a Llama map is lipnb's closed form itself, so
        # the paper's loop differentiates transformers' LlamaAttention instead (as bench/workloads.py does).
        closed = f.closed_form() if isinstance(f, models.LayerMap) else f
        module = llama.module_map(model, layer) if llama.is_llama(model) and kind == "self" else f
        lipnb_runs: dict[str, tuple[Map, dict]] = {
            "lipnb": (f, {"tol": LIPNB_TOL}),
            "lipnb-f32": (f, {"tol": LIPNB_TOL, "presolve": None}),
            "lipnb-tight": (f, {"tol": 1e-6}),
            "lipnb-autograd": (lambda X, f=f: f(X), {"tol": LIPNB_TOL}),
            "lipnb-f64": (closed, {"tol": LIPNB_TOL, "dtype": torch.float64}),
        }
        runners: dict[str, Callable[[Tensor], dict]] = {"paper": lambda X, m=module: run_paper(m, X)} | {
            m: lambda X, fn=fn, options=options: run_lipnb(fn, X, **options) for m, (fn, options) in lipnb_runs.items()}
        for n in lengths:
            rows.append(bench_inputs(name, layer, kind, n, batches[n], ids[n], model, f, map64, lipnb_runs, runners,
                                     methods, repeats, device, log))
    return rows


def bench_inputs(name: str, layer: int, kind: str, n: int, B: int, ids: Tensor, model: torch.nn.Module,
                 f: models.LayerMap, map64: models.LayerMap, lipnb_runs: dict[str, tuple[Map, dict]],
                 runners: dict[str, Callable[[Tensor], dict]], methods: list[str], repeats: int,
                 device: torch.device, log: Callable[[str], None]) -> dict:
    """Every method on the ``B`` inputs of ``n`` tokens, interleaved and repeated; one row of the record."""
    X = models.attention_inputs(model, layer, ids[:B].to(device), kind=kind)
    log(f"\n{name} layer {layer} ({kind}), n = {n}, batch {B}, d = {X.shape[-1]}, device {device}")
    t0 = time.perf_counter()
    ref = reference(map64, X)
    log(f"  reference: float64 ARPACK in {time.perf_counter() - t0:.1f} s "
        f"({statistics.mean(ref['arpack_products']):.0f} products/input); module Rayleigh gap "
        f"{max(ref['module_rayleigh_gap']):.1e}, module residual {max(ref['module_residual']):.1e}")
    timings: dict[str, dict] = {m: {"wall": [], "cpu": [], "peak_MiB": []} for m in methods}
    forward: list[float] = []
    results: dict[str, dict] = {}
    for rep in range(repeats):
        order = methods[rep % len(methods):] + methods[: rep % len(methods)]   # rotate: interleaved
        for method in order:
            result, wall, cpu, mem = timed(lambda method=method: runners[method](X), device)
            timings[method]["wall"].append(wall)
            timings[method]["cpu"].append(cpu)
            timings[method]["peak_MiB"].append(mem)
            results[method] = result
        with torch.no_grad():
            forward.append(timed(lambda: {"Y": f(X)}, device)[1])
    for method in [m for m in methods if m in lipnb_runs]:     # iteration counts, from an untimed twin run
        fn, options = lipnb_runs[method]
        details = run_lipnb(fn, X, detailed=True, **options)
        if max(benchmark.relative_errors(details["values"], results[method]["values"])) > 1e-6:
            raise RuntimeError(f"{method}: the detailed run disagrees with the timed one")
        results[method] = details
    row = {"model": name, "layer": layer, "kind": kind, "n": n, "batch": B, "d": int(X.shape[-1]),
           "reference": ref, "forward_s": statistics.median(forward), "cost_model": f.flops(n), "methods": {}}
    fns = {"paper": f} | {m: fn for m, (fn, _) in lipnb_runs.items()}
    for method in methods:
        res, tm = results[method], timings[method]
        errors = benchmark.relative_errors(res["values"], ref["values"])
        x = X[:1].double() if method == "lipnb-f64" else X[:1]
        flops = flops_per_product(method, fns[method], x)
        wall = statistics.median(tm["wall"])
        row["methods"][method] = {
            "wall_s": tm["wall"], "cpu_s": tm["cpu"], "median_wall_s": wall,
            "median_cpu_s": statistics.median(tm["cpu"]), "per_input_s": wall / B,
            "peak_MiB": max(tm["peak_MiB"]), "iterations": res["iterations"],
            "mean_iterations": sum(res["iterations"]) / B,
            "mean_presolve_iterations": sum(res.get("presolve_iterations", [0])) / B,
            "dtype": str(x.dtype)[6:], "converged": sum(res["converged"]),
            "values": res["values"], "max_rel_error": max(errors),
            "median_rel_error": statistics.median(errors),
            "flops_per_product": flops["product"], "flops_linearize": flops["linearize"],
        }
    paper_wall = row["methods"]["paper"]["median_wall_s"] if "paper" in methods else None
    row["speedup"] = {m: paper_wall / v["median_wall_s"] for m, v in row["methods"].items()
                      if paper_wall is not None and m != "paper"}
    return row


def add_rates(rows: list[dict], peaks: dict[str, float], presolve_dtype: str = "bfloat16") -> None:
    """Achieved FLOP/s of each method, and the fraction of its time that the counted FLOPs would take at
    the measured matrix-product peaks (the presolve's products at the ``presolve_dtype`` peak)."""
    for row in rows:
        B = row["batch"]
        for v in row["methods"].values():
            products, presolved = v["mean_iterations"] * B, v["mean_presolve_iterations"] * B
            total = (products + presolved) * v["flops_per_product"] + B * v["flops_linearize"]
            ideal = (products * v["flops_per_product"] + B * v["flops_linearize"]) / peaks[v["dtype"]]
            if presolved:
                ideal += presolved * v["flops_per_product"] / peaks[presolve_dtype]
            v["achieved_flops"] = total / v["median_wall_s"]
            v["fraction_of_peak"] = ideal / v["median_wall_s"]


def log_rows(rows: list[dict], log: Callable[[str], None]) -> None:
    for row in rows:
        log(f"\n{row['model']} layer {row['layer']} ({row['kind']}), n = {row['n']}, batch {row['batch']}: "
            f"forward pass {row['forward_s'] * 1e3:.1f} ms")
        for method, v in row["methods"].items():
            log(f"  {method:15} {v['median_wall_s']:8.2f} s ({v['per_input_s'] * 1e3:8.1f} ms/input, "
                f"cpu {v['median_cpu_s']:7.2f} s)  steps {v['mean_iterations']:5.1f} "
                f"+{v['mean_presolve_iterations']:4.1f} bf16 (max "
                f"{max(v['iterations']):3d})  conv {v['converged']}/{row['batch']}  max err {v['max_rel_error']:.1e}  "
                f"peak {v['peak_MiB'] / row['batch']:7.1f} MiB/input  {v['achieved_flops'] / 1e9:6.1f} GFLOP/s "
                f"({100 * v['fraction_of_peak']:.0f}% of peak)"
                + (f"  speedup {row['speedup'][method]:5.1f}x" if method in row["speedup"] else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 16, 32, batch 3, 2 repeats (about 1 min on CPU)")
    parser.add_argument("--n", type=int, nargs="+", help="sequence lengths (default 32 128 512)")
    parser.add_argument("--batch", type=int, help="inputs per length (default 32)")
    parser.add_argument("--batch-large", type=int, default=None,
                        help="inputs per length for n > 256 (default 8 on CPU, --batch on CUDA)")
    parser.add_argument("--repeats", type=int, help="timed repeats per method, interleaved (default 3)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: lipnb.profiles.default_device())")
    parser.add_argument("--models", nargs="+", default=None,
                        help="model:layer specs (default minilm:2; on CUDA also gpt2-random:6 at n = 512)")
    parser.add_argument("--kind", nargs="+", default=["self"], choices=list(models.KINDS),
                        help="attention_map kinds (default self)")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(benchmark.METHOD_LABELS))
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = parser.parse_args(argv)

    device = torch.device(args.device) if args.device else profiles.default_device()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("LIPNB_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    quick = args.quick
    lengths = args.n or ([16, 32] if quick else [32, 128, 512])
    batch = args.batch or (3 if quick else 32)
    batch_large = args.batch_large or (8 if device.type == "cpu" else batch)
    repeats = args.repeats or (2 if quick else 3)
    methods = args.methods or (["paper", "lipnb"] if quick else list(benchmark.METHOD_LABELS))
    specs = args.models or (["minilm:2"] if device.type == "cpu" or quick else ["minilm:2", "gpt2-random:6"])
    out = args.out or benchmark.record_path(f"lipschitz-{device.type}{'-quick' if quick else ''}")
    torch.manual_seed(0)

    def log(line: str) -> None:
        print(line, flush=True)

    started, commit = dt.datetime.now(dt.timezone.utc), git_commit()       # the code as imported
    load_start = load_average()
    log(f"device {device} ({device_name(device)}), {torch.get_num_threads()} threads, load {load_start}")
    rows = []
    for spec in specs:
        spec_lengths = lengths if not spec.startswith("gpt2") or args.n else [512]
        rows += bench_model(spec, spec_lengths, lambda n: batch if n <= 256 else min(batch, batch_large),
                            methods, repeats, device, args.kind, log)
    # Matrix-product peaks of the dtypes the run used, and only those: bfloat16 only if a presolve ran.
    used = {v["dtype"] for row in rows for v in row["methods"].values()}
    used |= {"bfloat16"} if any(v["mean_presolve_iterations"] for row in rows for v in row["methods"].values()) \
        else set()
    peaks = {dtype: peak_flops(device, getattr(torch, dtype)) for dtype in sorted(used)}
    log("\nmatrix-product peaks " + ", ".join(f"{k} {v / 1e9:.1f}" for k, v in peaks.items()) + " GFLOP/s")
    add_rates(rows, peaks)
    log_rows(rows, log)
    record = {
        "schema": 2,
        "benchmark": "local Lipschitz constants: paper's per-input power iteration vs lipnb.local_lipschitz",
        "date": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 1),
        "quick": quick,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "load_average": {"start": load_start, "end": load_average()},
        "peak_flops_by_dtype": peaks,
        "versions": versions(commit),
        "command": "python bench/lipschitz.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "paper_method": {"tol": published.PAPER_TOL, "max_iter": published.PAPER_MAX_ITER, "dtype": "float32",
                         "products": "torch.func.jvp + torch.func.vjp per step, one input at a time"},
        "lipnb_defaults": {"method": "lanczos", "rtol": 1e-4, "max_iter": 200, "presolve": "auto"},
        "lipnb_tol": LIPNB_TOL,
        "runs": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(out)
    log(f"\nwrote {out}  ({record['duration_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
