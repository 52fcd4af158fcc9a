"""Adversarial inputs through real layers (Sec. 5.2, App. C.5): Lemma C.7's input on every head, and ``γ_h``.

The radius of the input is a parameter; Sec. 5.2 takes each layer's token radius
(:func:`lipnb.experiments.real_text.layer_radii`, the one definition of a token radius). Every sweep returns a cached
:class:`~lipnb.results.ResultTable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from .. import models
from ..arguments import as_radius, check_choice, check_index, check_lengths, check_positive_int, check_sequence
from ..core.inputs import head_spectra, lemma_c_7_input
from ..paper.published import published_A
from ..profiles import Profile, check_profile
from ..results import ResultTable, cached_table, progress
from .real_text import layer_radii, measure

__all__ = ["adversarial_layers", "adversarial_radii", "adversarial_sweep", "adversarial_table", "head_gamma_table"]


def adversarial_sweep(model_name: str, layer: int, lengths: Iterable[int], R: float, *,
                      heads: Sequence[int] | None = None, kinds: Sequence[models.MapKind] = ("head", "mha"),
                      A_source: str = "head", estimator: str = "lanczos") -> ResultTable:
    """Sec. 5.2: ``Lip_X`` at Lemma C.7's input ``X`` built on head ``h``'s ``A`` at radius ``R``, ``n`` in ``lengths``.

    ``A_source``: ``"head"`` (the head's own, :func:`lipnb.models.head_A`) or ``"published"``
    (:func:`lipnb.paper.published.published_A`). ``kinds``: the single head ``h`` and/or the whole layer
    (:func:`lipnb.models.attention_map`); the model runs in float32, Lanczos at tolerance ``1e-4``.
    Columns: ``model, layer, head, kind, A_source, estimator, R, n, lip``: ``head`` is the head whose ``A`` built
    the input (and, for ``kind="head"``, the head measured). Arguments are checked before any work.
    """
    models.maps.check_model_name(model_name)
    layer, lengths = check_positive_int(layer, "layer", 0), check_lengths(lengths, minimum=2)
    R = float(as_radius(R, "R"))
    heads = None if heads is None else check_lengths(heads, "heads", minimum=0)
    kinds = [models.maps.check_kind(kind) for kind in check_sequence(kinds, "kinds")]
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds must be distinct; got {kinds}")
    check_choice(A_source, "A_source", ("head", "published"))
    check_choice(estimator, "estimator", ("lanczos", "published"))
    params = {"model": model_name, "layer": layer, "lengths": lengths, "R": round(float(R), 6),
              "heads": None if heads is None else list(heads), "kinds": list(kinds), "A_source": A_source,
              "estimator": estimator}

    def compute() -> dict[str, list]:
        model, _ = models.load_shared(model_name)
        models.layer_module(model, layer)
        p, H = next(model.parameters()), model.config.num_attention_heads
        chosen = range(H) if heads is None else [check_index(h, "heads", H) for h in heads]
        rows = []
        for h in progress(list(chosen), desc=f"{model_name} layer {layer} heads"):
            A = (models.head_A(model, layer, h) if A_source == "head" else published_A(model, layer, h)).double()
            X = lemma_c_7_input(A, float(R), max(lengths)).to(p)
            for kind in kinds:
                fn = models.attention_map(model, layer, kind, head=h if kind == "head" else None)
                lip = torch.cat([measure(fn, X[:, :n], estimator) for n in lengths])
                rows.append(pd.DataFrame({"model": model_name, "layer": layer, "head": h, "kind": kind,
                                          "A_source": A_source, "estimator": estimator, "R": float(R),
                                          "n": lengths, "lip": lip.cpu().numpy()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("adversarial_sweep", params, compute)


def head_gamma_table(model_name: str, lengths: Iterable[int], per_length: int) -> ResultTable:
    """App. C.5: ``γ_h`` (Prop. 3.4) of every head of every layer, and each layer's token radius on Alice.

    One row per ``layer`` and ``head``: ``gamma``, ``positive`` (1 where Sec. 5.2's rule picks the positive
    case) and ``radius``, the layer's :func:`~lipnb.experiments.real_text.layer_radii` over the sequences of ``lengths``
    (the same for every head of a layer). A cached table; ``table.pivot("gamma", "layer", "head")`` gives the
    ``(L, H)`` matrix.
    """
    models.maps.check_model_name(model_name)
    lengths, per_length = check_lengths(lengths), check_positive_int(per_length, "per_length")
    params = {"model": model_name, "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, torch.Tensor]:
        model, _ = models.load_shared(model_name)
        layers = list(range(models.num_layers(model)))
        radii = layer_radii(model_name, lengths, per_length)
        spectra = [head_spectra(models.head_matrices(model, i).A) for i in progress(layers, desc="heads")]
        gamma = torch.stack([s.gamma for s in spectra])
        L, H = gamma.shape
        radius = torch.tensor([float(radii[i]) for i in layers], dtype=torch.float64)
        return {"layer": torch.arange(L).repeat_interleave(H), "head": torch.arange(H).repeat(L),
                "gamma": gamma.flatten(), "positive": torch.stack([s.positive for s in spectra]).flatten().long(),
                "radius": radius.repeat_interleave(H)}

    return cached_table("head_gamma_table", params, compute)


def adversarial_layers(p: Profile) -> dict[str, list[int]]:
    """The layers whose every head is studied: every layer (``paper``), or in ``quick`` the first, middle and last
    of the encoder and the middle layer of the decoder and of random GPT-2."""
    check_profile(p)
    chosen = {}
    for name in (p.encoder, p.decoder, p.gpt2):
        L = models.num_layers(models.load_shared(name)[0])
        if p.every_adversarial_layer:
            chosen[name] = list(range(L))
        else:
            chosen[name] = sorted({0, L // 2, L - 1}) if name == p.encoder else [L // 2]
    return chosen


def adversarial_radii(name: str, p: Profile) -> pd.Series:
    """Sec. 5.2's radius ``R_ℓ`` of every layer of model ``name``: :func:`~.real_text.layer_radii`
    over the profile's three longest Alice lengths."""
    check_profile(p)
    return layer_radii(name, p.alice_lengths[-3:], p.text_per_length)


def adversarial_table(p: Profile) -> ResultTable:
    """Sec. 5.2 in full: :func:`adversarial_sweep` on every head of :func:`adversarial_layers`, at the layer's
    :func:`adversarial_radii`."""
    check_profile(p)
    tables = []
    for name, layers in adversarial_layers(p).items():
        radii = adversarial_radii(name, p)
        tables += [adversarial_sweep(name, layer, p.adversarial_lengths, float(radii[layer])) for layer in layers]
    return ResultTable(pd.concat([t.frame for t in tables], ignore_index=True),
                       {"sweep": "adversarial_table", "profile": p.name, "parts": [t.provenance for t in tables]})
