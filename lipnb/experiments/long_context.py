"""SmolLM2 to its full context: ``Lip_X`` of its attention layers (Def 2.2, causal, rotary) for n = 512 to 8,192.

``python -m lipnb.experiments.long_context --text alice --lengths 512 1024`` measures one text at the given lengths with
``local_lipschitz``'s default call (each value with its certificate) and merges the rows into the record
``lipnb/experiments/long_context_records/smollm2-long.json`` with their provenance (``--rounding``: the tables of
:func:`rounding_sensitivity` and :func:`sink_terms` instead); the record ships with lipnb. ``_GRID``
says which layers are measured at which length (every layer at the lengths of ``_ALL_LAYERS``, ``_LAYERS``
otherwise, ``_DEEPEST`` alone at the longest), ``_WINDOWS`` how many windows of each text
(:func:`lipnb.data.token_sequences`, restarting at the text's first token for each length; AG_NEWS is its first
1,000 test articles joined by spaces). For ``FOCUS``, each head alone (before the output projection) and the
concentration of its attention rows are recorded too. ``--layers``, ``--windows``, ``--heads`` and ``--record``
measure another grid: ``GPU_RECORD`` holds every layer at nine lengths from 512 to 8,192 (a factor √2 apart), three
windows per text and length, ``FOCUS``'s heads at each, the rounding draws and sinks at 512, 2,048 and 8,192,
measured on one GPU. A chapter reads a record with :func:`long_context_record`, compares two with :func:`agreement` and
re-measures a slice with :func:`replay_long_context`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import torch
import transformers
from torch import Tensor

from .. import __version__, data, models
from ..arguments import (
    check_bool,
    check_choice,
    check_index,
    check_lengths,
    check_positive_int,
    check_record,
    check_record_file,
    check_sequence,
    check_writable_dir,
    command_line_int,
)
from ..core.lipschitz import local_lipschitz
from ..models.quantization import BLOCK
from ..results import cached_table
from .charlm_runs import cpu_name, git_state, write_record
from .real_text import token_radius

__all__ = ["FOCUS", "GPU_RECORD", "LONG_CONTEXT_MODEL", "agreement", "long_context_heads", "long_context_layers",
           "long_context_record", "replay_long_context", "rounding_sensitivity", "sink_terms"]

LONG_CONTEXT_MODEL, _RECORD = "smollm2", "smollm2-long"
GPU_RECORD = "smollm2-long-gpu"   # every layer at nine lengths, three windows, on one GPU
_RECORDS = (_RECORD, GPU_RECORD)
LENGTHS = (512, 1024, 2048, 4096, 8192)
_ALL_LAYERS = (512, 2048)           # lengths at which every layer is measured
_LAYERS = (0, 14, 27, 29)           # first, middle, fastest-growing between n = 16 and 128 on Alice, last
_DEEPEST = 8192                     # the longest length (SmolLM2's context): FOCUS alone, one window per text
FOCUS = 27
_WINDOWS = 2                        # windows per text and length (one at _DEEPEST)
_GRID = {n: ("all" if n in _ALL_LAYERS else [FOCUS] if n == _DEEPEST else list(_LAYERS)) for n in LENGTHS}


def _record_path(name: str = _RECORD) -> Path:
    """Where the record ``name`` (one of ``_RECORDS``) is stored (inside the package)."""
    check_choice(name, "name", _RECORDS)
    return Path(__file__).with_name("long_context_records") / f"{name}.json"


def long_context_record(name: str = _RECORD) -> dict:
    """A stored record: ``rows`` (one per text, length, window and layer), ``heads``, ``provenance``."""
    return json.loads(_record_path(name).read_text())


def agreement(first: dict, second: dict) -> pd.DataFrame:
    """The layer rows two records share (same text, length, window and layer: the same input), side by side:
    ``lip_a, lip_b, error_a, error_b`` and ``gap = |lip_a / lip_b - 1|``; under the Krylov premise (each value
    approximates the top singular value) two certified values of one norm differ by at most ``error_a + error_b``
    (relative). Two records that share no input are refused: they cannot agree or disagree."""
    keys = ["text", "n", "window", "layer"]
    joined = long_context_layers(check_record(first, "first", ("rows",)))[[*keys, "lip", "error"]].merge(
        long_context_layers(check_record(second, "second", ("rows",)))[[*keys, "lip", "error"]], on=keys,
        suffixes=("_a", "_b"))
    if joined.empty:
        raise ValueError("the two records share no input (text, length, window and layer): nothing to compare")
    return joined.assign(gap=(joined.lip_a / joined.lip_b - 1).abs())


def _attention_rows(P: Tensor) -> dict[str, Tensor]:
    """How concentrated each head's attention rows are, averaged over the rows of each input, ``(B, H)`` each:
    the largest weight ``max_j P_ij``, the entropy ``-Σ_j P_ij log P_ij`` and ``1 / Σ_j P_ij²`` (the number of
    tokens a row spreads over)."""
    P = P.double()
    entropy = -(P * P.clamp_min(1e-300).log()).sum(-1)
    return {"row_max": P.amax(-1).mean(-1), "entropy": entropy.mean(-1),
            "spread": P.square().sum(-1).reciprocal().mean(-1)}


def sink_terms(lengths: Sequence[int] = (512, 1024, 2048), text: str = "alice") -> pd.DataFrame:
    """Layer ``FOCUS``'s heads on the first window of ``text`` at each length: the share of all attention that
    goes to the most attended token, ``max_j Σ_i P_ij / n``, and the largest token column of the Jacobian's value
    path (Lemma C.2's ``P ⊗ W_V`` term, whose column ``j`` has norm ``||P_:j||_2 ||W_V,h||_2``). Columns ``n, head,
    sink_share, sink_token, value_term``."""
    lengths, text = check_lengths(lengths, minimum=2, maximum=_DEEPEST), check_choice(text, "text", data.DATASETS)
    params = {"lengths": list(lengths), "text": text, "layer": FOCUS}

    def compute() -> dict[str, list]:
        model = models.load_shared(LONG_CONTEXT_MODEL)[0]
        attention = model.layers[FOCUS].self_attn
        k = attention.head_dim
        rows: dict[str, list] = {"n": [], "head": [], "sink_share": [], "sink_token": [], "value_term": []}
        for n in lengths:
            X = models.attention_inputs(model, FOCUS, _windows(text, n)[:1], "mha")
            P = models.attention_map(model, FOCUS, "mha").linearize(X).P[0].double()     # (H, n, n)
            load = P.sum(1)                                                               # (H, n): Σ_i P_ij
            columns = P.square().sum(1).sqrt()                                            # ||P_:j||_2
            for h in range(P.shape[0]):
                g = h // attention.num_key_value_groups
                Wv = attention.v_proj.weight.detach().double()[g * k:(g + 1) * k]
                rows["n"].append(n)
                rows["head"].append(h)
                rows["sink_share"].append(float(load[h].max() / n))
                rows["sink_token"].append(int(load[h].argmax()))
                rows["value_term"].append(float(columns[h].max() * torch.linalg.matrix_norm(Wv, ord=2)))
        return rows

    return cached_table("long_context_sinks", params, compute).frame


def _windows(text: str, n: int, count: int | None = None) -> Tensor:
    tokenizer = models.load_shared(LONG_CONTEXT_MODEL)[1]
    count = (1 if n == _DEEPEST else _WINDOWS) if count is None else count
    return data.token_sequences(data.dataset_text(text), tokenizer, [n], count, restart_per_length=True)[n]


def _layers(n: int) -> list[int]:
    chosen = _GRID[n]
    if chosen != "all":
        return list(chosen)
    return list(range(models.num_layers(models.load_shared(LONG_CONTEXT_MODEL)[0])))


def _timed(job: object) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = job()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _measure_text(text: str, n: int, *, layers: Sequence[int] | None = None, windows: int | None = None,
                 heads: bool | None = None, log: bool = False) -> tuple[list[dict], list[dict]]:
    """Every window of ``text`` at length ``n``: one row per window and layer (``_GRID[n]`` and ``_WINDOWS`` unless
    ``layers`` and ``windows`` say otherwise), and for ``FOCUS`` one row per window and head (``heads``; default
    below ``_DEEPEST``); ``log`` prints each value. On the default device (the GPU when there is one). Every argument
    is checked before SmolLM2 is loaded."""
    layers, windows, heads = _checked_request(text, n, layers, windows, heads)
    check_bool(log, "log")
    model = models.load_shared(LONG_CONTEXT_MODEL)[0]
    ids = _windows(text, n, windows)
    chosen = _layers(n) if layers is None else list(layers)
    inputs, forward_s, _ = _timed(lambda: models.attention_inputs(model, chosen, ids, "mha"))
    rows, head_rows = [], []
    for layer in chosen:
        X = inputs[layer]
        f = models.attention_map(model, layer, "mha")
        for w in range(len(X)):
            if X.is_cuda:
                torch.cuda.reset_peak_memory_stats()
            result, wall, cpu = _timed(lambda f=f, x=X[w:w + 1]: local_lipschitz(f, x, detailed=True))
            rows.append({"text": text, "n": n, "window": w, "layer": layer, "lip": float(result.value[0]),
                         "error": float(result.error[0]), "converged": bool(result.converged[0]),
                         "iterations": int(result.iterations[0]),
                         "presolve_iterations": int(result.presolve_iterations[0]),
                         "radius": float(token_radius(X[w:w + 1])[0]),
                         "max_norm": float(X[w].double().norm(dim=-1).max()), "wall_s": wall, "cpu_s": cpu,
                         "forward_s": forward_s, "peak_rss_gib": _peak_rss_gib(),
                         **({"peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30} if X.is_cuda else {})})
            if log:
                print(f"{text} n={n} window {w} layer {layer}: {rows[-1]['lip']:.1f} "
                      f"(error {rows[-1]['error']:.1e}) in {wall:.1f} s", flush=True)
        if layer == FOCUS and heads:
            head_rows += _heads(model, X, text, n)
    return rows, head_rows


def _checked_request(text: str, n: int, layers: Sequence[int] | None, windows: int | None,
                     heads: bool | None) -> tuple[list[int] | None, int | None, bool]:
    """:func:`_measure_text`'s ``(layers, windows, heads)``, checked with ``text`` and ``n`` before SmolLM2 loads."""
    check_choice(text, "text", data.DATASETS)
    if layers is None and n not in _GRID:
        raise ValueError(f"n must be one of {LENGTHS} unless layers are given; got {n!r}")
    check_lengths([n], "n", minimum=2, maximum=_DEEPEST)
    if layers is not None:   # _LAYERS ends with SmolLM2's last layer
        layers = [check_index(i, "each of layers", _LAYERS[-1] + 1) for i in check_sequence(layers, "layers")]
    windows = None if windows is None else check_positive_int(windows, "windows")
    return layers, windows, n < _DEEPEST if heads is None else check_bool(heads, "heads")


def _heads(model: torch.nn.Module, X: Tensor, text: str, n: int) -> list[dict]:
    rows = []
    f = models.attention_map(model, FOCUS, "mha")
    for w in range(len(X)):
        concentration = _attention_rows(f.linearize(X[w:w + 1]).P)
        for h in range(model.config.num_attention_heads):
            head = models.attention_map(model, FOCUS, "head", head=h)
            result = local_lipschitz(head, X[w:w + 1], detailed=True)
            rows.append({"text": text, "n": n, "window": w, "layer": FOCUS, "head": h,
                         "lip": float(result.value[0]), "error": float(result.error[0]),
                         "converged": bool(result.converged[0]),
                         **{k: float(v[0, h]) for k, v in concentration.items()}})
    return rows


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def long_context_layers(record: dict | None = None) -> pd.DataFrame:
    """The record's layer rows as a table (``None``: the CPU record's; an empty record is refused, not replaced)."""
    record = long_context_record() if record is None else check_record(record, "record", ("rows",))
    return pd.DataFrame(check_sequence(record["rows"], "the record's rows"))


def long_context_heads(record: dict | None = None) -> pd.DataFrame:
    """The record's per-head rows (layer ``FOCUS``) as a table (``None``: the CPU record's)."""
    record = long_context_record() if record is None else check_record(record, "record", ("heads",))
    return pd.DataFrame(check_sequence(record["heads"], "the record's heads"))


def replay_long_context(text: str, n: int, layer: int, record: dict | None = None) -> pd.DataFrame:
    """Re-measure ``record``'s (default the CPU record's) windows of ``text`` at ``n`` for ``layer`` here, beside
    the recorded values."""
    stored = long_context_layers(record)
    stored = stored[(stored.text == text) & (stored.n == n) & (stored.layer == layer)]
    if stored.empty:
        raise ValueError(f"the record has no rows for text={text!r}, n={n!r}, layer={layer!r}")
    rows, _ = _measure_text(text, n, layers=[layer], windows=stored.window.nunique(), heads=False)
    fresh = pd.DataFrame(rows)[["window", "lip", "error"]].rename(columns={"lip": "replayed",
                                                                           "error": "replayed_error"})
    return stored[["window", "lip", "error"]].merge(fresh, on="window")


def _rounding_steps(weight: Tensor) -> Tensor:
    """The ``Q4_1`` step of each entry's block of ``BLOCK`` consecutive entries of a row, ``(max - min) / 15``:
    the de-quantised weights sit on that grid, so the original ones lay within half a step of them."""
    blocks = weight.detach().reshape(weight.shape[0], -1, BLOCK)
    step = (blocks.amax(-1, keepdim=True) - blocks.amin(-1, keepdim=True)) / 15
    return step.expand_as(blocks).reshape(weight.shape)


def rounding_sensitivity(lengths: Sequence[int] = _ALL_LAYERS, draws: int = 3, text: str = "alice") -> pd.DataFrame:
    """``Lip_X`` of ``FOCUS`` on the first window of ``text`` with its projection weights as distributed and moved
    ``draws`` times by independent uniform noise within half a ``Q4_1`` step (:func:`_rounding_steps`): how much the
    4-bit rounding could move the long-context values. Columns ``n, draw`` (``-1``: as distributed), ``lip``."""
    lengths, text = check_lengths(lengths, minimum=2, maximum=_DEEPEST), check_choice(text, "text", data.DATASETS)
    draws = check_positive_int(draws, "draws", 0)
    params = {"lengths": list(lengths), "draws": draws, "text": text, "layer": FOCUS}

    def compute() -> dict[str, list]:
        model = models.load_shared(LONG_CONTEXT_MODEL)[0]
        noisy = copy.deepcopy(model)
        projections = [getattr(noisy.layers[FOCUS].self_attn, name) for name in ("q_proj", "k_proj", "v_proj",
                                                                                  "o_proj")]
        originals = [p.weight.detach().clone() for p in projections]
        generator = torch.Generator().manual_seed(0)
        rows: dict[str, list] = {"n": [], "draw": [], "lip": []}
        for n in lengths:
            X = models.attention_inputs(model, FOCUS, _windows(text, n)[:1], "mha")
            for draw in range(-1, draws):
                with torch.no_grad():
                    for p, W in zip(projections, originals, strict=True):
                        noise = (torch.rand(W.shape, generator=generator, dtype=W.dtype) - 0.5).to(W.device)
                        p.weight.copy_(W if draw < 0 else W + noise * _rounding_steps(W))
                f = models.attention_map(noisy, FOCUS, "mha")
                rows["n"].append(n)
                rows["draw"].append(draw)
                rows["lip"].append(float(local_lipschitz(f, X)[0]))
        return rows

    return cached_table("long_context_rounding", params, compute).frame


def _provenance(begun: float, args: argparse.Namespace, argv: Sequence[str] | None) -> dict:
    """What a record keeps of one run: when, how long, which code, which machine, which command."""
    command = " ".join([sys.executable, "-m", "lipnb.experiments.long_context", *(argv or sys.argv[1:])])
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.perf_counter() - begun, 1), "lipnb": __version__, "git": git_state(),
            "torch": torch.__version__, "transformers": transformers.__version__, "cpu": cpu_name(),
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "threads": args.threads,
            "load_average": list(os.getloadavg()), "command": command}


def _main(argv: Sequence[str] | None = None) -> int:
    """Measure one text at the given lengths and merge the rows into the record (after each length)."""
    parser = argparse.ArgumentParser(prog="python -m lipnb.experiments.long_context",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--text", choices=data.DATASETS, required=True)
    parser.add_argument("--lengths", type=command_line_int(2), nargs="+",
                        help="default LENGTHS (ALL_LAYERS with --rounding)")
    parser.add_argument("--threads", type=command_line_int(1), default=2)
    parser.add_argument("--layers", type=command_line_int(0), nargs="+",
                        help="these layers at every length (default: GRID)")
    parser.add_argument("--windows", type=command_line_int(1), help="windows per text and length (default: WINDOWS)")
    parser.add_argument("--heads", action="store_true", help="layer FOCUS's heads at every length")
    parser.add_argument("--record", type=Path, default=None, help="the record's path (default: record_path())")
    parser.add_argument("--rounding", action="store_true",
                        help="record rounding_sensitivity() and both texts' sink_terms() instead")
    args = parser.parse_args(argv)
    path = args.record or _record_path()
    try:   # every argument and the record checked before SmolLM2 is loaded: a one-line error, exit status 2
        if args.rounding or path.exists() or path.is_dir():
            check_record_file(path, "--record", ("rows", "heads", "provenance"))
        else:
            check_writable_dir(path.parent, "--record")
        lengths = check_lengths(args.lengths or (_ALL_LAYERS if args.rounding else LENGTHS), "--lengths", minimum=2,
                                maximum=_DEEPEST)
        if not args.rounding:
            for n in lengths:
                _checked_request(args.text, n, args.layers, args.windows, args.heads or None)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    torch.set_num_threads(args.threads)
    if args.rounding:
        begun = time.perf_counter()
        record = json.loads(path.read_text())
        record["rounding"] = rounding_sensitivity(lengths, text=args.text).to_dict("records")
        record["sinks"] = pd.concat([sink_terms(lengths, text=t).assign(text=t)
                                     for t in data.DATASETS]).to_dict("records")
        record["provenance"].append({"text": args.text, "n": "rounding", **_provenance(begun, args, argv)})
        write_record(path, record)
        return 0
    for n in lengths:
        begun = time.perf_counter()
        rows, heads = _measure_text(args.text, n, layers=args.layers, windows=args.windows,
                                   heads=True if args.heads else None, log=True)
        record = json.loads(path.read_text()) if path.exists() else {
            "schema": 1, "model": LONG_CONTEXT_MODEL, "kind": "mha", "call": "local_lipschitz(f, X, detailed=True)",
            "grid": {str(k): v for k, v in _GRID.items()} if args.layers is None else args.layers,
            "windows": args.windows or _WINDOWS, "rows": [], "heads": [],
            "provenance": []}
        keep = [r for r in record["rows"] if (r["text"], r["n"]) != (args.text, n)]
        record["rows"] = keep + rows
        record["heads"] = [r for r in record["heads"] if (r["text"], r["n"]) != (args.text, n)] + heads
        record["provenance"].append({"text": args.text, "n": n, **_provenance(begun, args, argv)})
        write_record(path, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
