"""Rotary positions against Sec. 5.2's construction and App. C.5's ``γ_h``: the rotary head on Lemma C.7's input and
on the aligned input, a Llama-style layer with and without its rotation, and ``γ_h(m)`` per offset.

A rotary head scores query ``i`` and key ``j`` with ``A_h(i-j) = s K_gᵀ R_{i-j} Q_h``
(:func:`lipnb.models.offset_matrices`). Lemma C.7's input built on ``A_h(0)`` relies on every copy of its
repeated token scoring alike, which the rotation breaks; the aligned input ``x_j = T_j y_j``
(:func:`lipnb.models.aligned_input`) undoes the rotation for one head. Every sweep returns a cached
:class:`~lipnb.results.ResultTable`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from .. import models
from ..arguments import as_radius, check_index, check_lengths, check_positive_int
from ..core.bounds import gamma
from ..core.inputs import lemma_c_7_input
from ..core.lipschitz import local_lipschitz
from ..models import llama
from ..results import ResultTable, cached_table, progress
from .adversarial import adversarial_sweep

__all__ = ["ALIGNED_INPUTS", "offset_gamma_table", "rotary_aligned_sweep", "rotary_layer_sweep"]

# The three measurements of :func:`rotary_aligned_sweep`, in the order a table shows them.
ALIGNED_INPUTS = ("no rotation", "rotary", "rotary, aligned")


def _head_A(f: llama.RotaryAttentionMap) -> torch.Tensor:
    """Def 2.1's ``A_h = s K_gᵀ Q_h`` of a single-head rotary map, in float64 (offset zero)."""
    return f.Wk.double().T @ f.Wq.double() * f.scaling


def rotary_aligned_sweep(model_name: str, layer: int, lengths: Iterable[int], two_gamma_r2: float, *,
                         heads: Sequence[int] | None = None) -> ResultTable:
    """Sec. 5.2 under rotary positions, head by head: ``Lip_X`` of head ``h`` alone at Lemma C.7's input ``Y``
    (built on ``A_h(0)`` at the radius ``R`` where ``2 γ_h R² = two_gamma_r2``), without the rotation and with it,
    and with it at the aligned input ``Z = T Y``, on which the rotary head computes what the unrotated head computes
    on ``Y``; the input of length ``n`` is the first ``n`` tokens. In float64, ``local_lipschitz``'s default call.

    Columns ``model, layer, head, input`` (one of :data:`ALIGNED_INPUTS`), ``n, lip``, and per head ``R``,
    ``aligned_ratio`` (``max_j |z_j| / R``) and ``output_gap`` (``max |f_rot(Z) - f(Y)| / max |f(Y)|``, rounding
    when the aligned input does what it should). A Llama-style model (rotary positions) only.
    """
    models.maps.check_model_name(model_name)
    layer, lengths = check_positive_int(layer, "layer", 0), check_lengths(lengths, minimum=2)
    target = float(as_radius(two_gamma_r2, "two_gamma_r2"))
    heads = None if heads is None else check_lengths(heads, "heads", minimum=0)
    params = {"model": model_name, "layer": layer, "lengths": lengths, "two_gamma_r2": round(target, 9),
              "heads": None if heads is None else list(heads)}

    def compute() -> dict[str, list]:
        model = models.load_shared(model_name)[0]
        if not llama.is_llama(model):
            raise ValueError(f"{model_name} has no rotary positions (a Llama-style model is needed)")
        H = model.config.num_attention_heads
        chosen = range(H) if heads is None else [check_index(h, "heads", H) for h in heads]
        rows: dict[str, list] = {k: [] for k in ("model", "layer", "head", "input", "n", "lip", "R", "aligned_ratio",
                                                 "output_gap")}
        for h in progress(list(chosen), desc=f"{model_name} layer {layer} heads"):
            rotated = llama.attention_map(model, layer, head=h)
            plain = llama.attention_map(model, layer, head=h, rotary=False)
            A = _head_A(rotated)
            R = math.sqrt(target / (2 * float(gamma(A))))
            Y = lemma_c_7_input(A, R, max(lengths))
            Z = llama.aligned_input(model, layer, h, Y)
            reference = plain(Y)
            gap = float((rotated(Z) - reference).abs().max() / reference.abs().max())
            ratio = float(Z.norm(dim=-1).max() / R)
            for name, f, X in zip(ALIGNED_INPUTS, (plain, rotated, rotated), (Y, Y, Z), strict=True):
                lip = torch.cat([local_lipschitz(f, X[:, :n]) for n in lengths])
                for n, value in zip(lengths, lip.tolist(), strict=True):
                    for column, item in (("model", model_name), ("layer", layer), ("head", h), ("input", name),
                                         ("n", n), ("lip", value), ("R", R), ("aligned_ratio", ratio),
                                         ("output_gap", gap)):
                        rows[column].append(item)
        return rows

    return cached_table("rotary_aligned_sweep", params, compute)


def rotary_layer_sweep(model_name: str, layer: int, lengths: Iterable[int], *, token_radius: float,
                       two_gamma_r2: float = 20.0, heads: Sequence[int] | None = None) -> pd.DataFrame:
    """Sec. 5.2 on a Llama-style layer with its rotary positions and without (the model ``model_name + "-norope"``):
    the whole layer (Def 2.2) at Lemma C.7's input built on each head's ``A_h(0)``, at two radii, ``token_radius``
    and the head's own radius where ``2 γ_h R² = two_gamma_r2``. Every part is an :func:`adversarial_sweep`
    (cached); the columns are its own, with ``rotary`` (``"yes"``/``"no"``) and ``radius`` (which of the two).
    ``heads``: those whose input is built (default every head)."""
    models.maps.check_model_name(model_name)
    twin = f"{model_name}-norope"
    models.maps.check_model_name(twin)
    layer, lengths = check_positive_int(layer, "layer", 0), check_lengths(lengths, minimum=2)
    token_radius, target = float(as_radius(token_radius, "token_radius")), float(as_radius(two_gamma_r2,
                                                                                            "two_gamma_r2"))
    model = models.load_shared(model_name)[0]
    H = model.config.num_attention_heads
    chosen = range(H) if heads is None else [check_index(h, "heads", H) for h in check_lengths(heads, "heads", 0)]
    parts = []
    for h in chosen:
        own = math.sqrt(target / (2 * float(gamma(models.head_A(model, layer, h).double()))))
        for label, R in (("token radius", token_radius), (f"2γR² = {target:g}", own)):
            for name, rotary in ((model_name, "yes"), (twin, "no")):
                sweep = adversarial_sweep(name, layer, lengths, R, heads=[h], kinds=("mha",))
                parts.append(sweep.frame.assign(rotary=rotary, radius=label))
    return pd.concat(parts, ignore_index=True)


def offset_gamma_table(model_name: str, offsets: Iterable[int]) -> ResultTable:
    """App. C.5 per rotary offset: Prop. 3.4's ``γ_h(m)`` of ``A_h(m)`` (:func:`lipnb.models.offset_spectra`) for
    every head ``h`` of every layer and each offset ``m``. Columns ``layer, offset, head, gamma, positive`` (1 where
    Sec. 5.2's rule picks the positive case)."""
    models.maps.check_model_name(model_name)
    offsets = check_lengths(offsets, "offsets", minimum=0)
    params = {"model": model_name, "offsets": offsets}

    def compute() -> dict[str, list]:
        model = models.load_shared(model_name)[0]
        if not llama.is_llama(model):
            raise ValueError(f"{model_name} has no rotary positions (a Llama-style model is needed)")
        rows: dict[str, list] = {"layer": [], "offset": [], "head": [], "gamma": [], "positive": []}
        for layer in progress(range(models.num_layers(model)), desc=f"{model_name} layers"):
            spectra = llama.offset_spectra(model, layer, offsets)
            M, H = spectra.gamma.shape
            rows["layer"] += [layer] * (M * H)
            rows["offset"] += [m for m in offsets for _ in range(H)]
            rows["head"] += list(range(H)) * M
            rows["gamma"] += spectra.gamma.flatten().tolist()
            rows["positive"] += spectra.positive.flatten().long().tolist()
        return rows

    return cached_table("offset_gamma_table", params, compute)
