"""What the chapter *How fast is it?* measures while the book is built, beside the recorded benchmark runs: the
closed-form Jacobian products of a real layer against autograd through the layer itself (Lemma C.2), and a small
side-by-side timing of :func:`lipnb.local_lipschitz` against the paper's power iteration (App. E.1).

Neither is a sweep to cache: the first is a check of the closed forms, the second a timing of this machine.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.lipschitz import local_lipschitz
from ..data import alice_text, token_sequences
from ..models.maps import KINDS, attention_inputs, attention_map
from ..paper.published import paper_power_iteration

__all__ = ["LiveTiming", "closed_form_gaps", "live_speedup"]


def _gap(a: Tensor, b: Tensor) -> float:
    """``||a - b|| / ||b||``."""
    return float((a - b).norm() / b.norm())


def closed_form_gaps(model: torch.nn.Module, layer: int, input_ids: Tensor, *, seed: int = 0) -> dict[str, float]:
    """Lemma C.2 in closed form against autograd through the layer, in float64: for every map kind, the largest
    relative difference between the closed form's ``f(X)``, ``J E`` and ``Jᵀ G`` and those of ``torch.func``
    (random ``E`` and ``G``, seeded), at the inputs that reach the map from ``input_ids``."""
    model64 = copy.deepcopy(model).double()
    generator = torch.Generator().manual_seed(seed)
    gaps = {}
    for kind in KINDS:
        f64 = attention_map(model64, layer, kind)
        X = attention_inputs(model64, layer, input_ids, kind=kind)
        E = torch.randn(X.shape, generator=generator, dtype=X.dtype)
        Y, JE = torch.func.jvp(f64, (X,), (E,))
        G = torch.randn(Y.shape, generator=generator, dtype=Y.dtype)
        JtG = torch.func.vjp(f64, X)[1](G)[0]
        lin = f64.linearize(X)
        gaps[kind] = max(_gap(lin.output, Y), _gap(lin.jvp(E), JE), _gap(lin.vjp(G), JtG))
    return gaps


@dataclass(frozen=True)
class LiveTiming:
    """One length of :func:`live_speedup`: median CPU seconds of the paper's loop and of the default call over the
    batch, their ratio, and the largest relative error of the default call against the float64 reference."""

    n: int
    inputs: int
    paper_cpu_s: float
    lipnb_cpu_s: float
    speedup: float
    max_rel_error: float


def live_speedup(model: torch.nn.Module, tokenizer: object, layer: int, lengths: tuple[int, ...] = (16, 32),
                 per_length: int = 3, repeats: int = 2) -> list[LiveTiming]:
    """The default call of :func:`lipnb.local_lipschitz` against the paper's power iteration (one input at a time,
    App. E.1) on the self-attention module of ``layer``, ``per_length`` windows of *Alice* of each length: median
    CPU time of ``repeats`` runs each, and the default call's largest error against a float64 reference
    (Lanczos at a relative residual of ``1e-12``, autograd through the float64 module)."""
    f = attention_map(model, layer, "self")
    f64 = attention_map(copy.deepcopy(model).double(), layer, "self")
    out = []
    for n in lengths:
        ids = token_sequences(alice_text(), tokenizer, [n], per_length)[n]
        X = attention_inputs(model, layer, ids, kind="self")
        exact = local_lipschitz(lambda Z: f64(Z), X.double(), tol=1e-12)  # autograd through the module
        times: dict[str, list[float]] = {"paper": [], "lipnb": []}
        for _ in range(repeats):
            start = time.process_time()
            for i in range(len(X)):
                paper_power_iteration(f, X[i: i + 1], seed=i)
            times["paper"].append(time.process_time() - start)
            start = time.process_time()
            values = local_lipschitz(f, X)
            times["lipnb"].append(time.process_time() - start)
        paper_s, lipnb_s = statistics.median(times["paper"]), statistics.median(times["lipnb"])
        error = float(((values.double() - exact) / exact).abs().max())
        out.append(LiveTiming(n, len(X), paper_s, lipnb_s, paper_s / lipnb_s, error))
    return out
