"""Part II's sweeps (Sec. 5, App. C.5, E.2): local constants of real layers on real and adversarial inputs.

Every sweep returns one tidy :class:`~lipnb.results.ResultTable` (a row per measured input), cached as
CSV keyed by its parameters, the profile and a hash of lipnb's source. The map is a parameter:
``kind`` is ``"head"`` (one head, Def 2.1, with its biases), ``"mha"`` (Def 2.2 + App. E.3),
``"self"`` or ``"block"`` (the Hugging Face modules, see :func:`lipnb.models.attention_map`);
``estimator`` is ``"lanczos"`` (the true local constant) or ``"published"`` (the paper's code).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd
import torch
from torch import Tensor, nn

from . import data, llama, models
from .heads import single_head
from .jacobian import MultiHeadMap
from .lipschitz import local_lipschitz
from .published import published_A, published_estimator
from .results import ResultTable, cached_table, progress
from .stats import bootstrap_slope, fit_line, power_law_break

__all__ = [
    "DATASETS",
    "GRIDS",
    "MAP_KINDS",
    "PAPER",
    "Grid",
    "adversarial_layers",
    "adversarial_sweep",
    "adversarial_table",
    "attention_inputs",
    "dataset_text",
    "grid",
    "growth_fits",
    "is_decoder",
    "layer_map",
    "layer_radii",
    "load_model",
    "num_layers",
    "position_aliasing",
    "real_data_sweep",
    "real_data_table",
    "token_radii",
]

DATASETS = ("alice", "ag_news")
MAP_KINDS = ("head", "mha", "self", "block")
PAPER: dict[str, float] = {
    # Sec. 5.3 ("close to n^{1/4}") and Theorem 3.3's worst case, which Sec. 5.2 reports reaching.
    "real-data exponent": 0.25,
    "worst-case exponent": 0.5,
    "adversarial exponent": 0.5,
    # bert_encoder/plot_bert_encoder.py draws 14.3 n^0.24 over layer 0's points (a drawn curve, not a fit).
    "drawn real-data curve, BERT encoder: constant": 14.3,
    "drawn real-data curve, BERT encoder: exponent": 0.24,
    # adversarial_data/adversarial.py: the C of the drawn C n^(1/2) and the radius R of each panel.
    "adversarial C, BERT encoder (layer 0, head 0)": 4.39,
    "adversarial C, BERT decoder (layer 6, head 7)": 5.73,
    "adversarial C, random GPT-2 (layer 6, head 0)": 0.92,
    "adversarial C, pretrained GPT-2 (layer 0, head 0)": 46.9,
    "adversarial R, BERT encoder": 15.5,
    "adversarial R, BERT decoder": 21.5,
    "adversarial R, random GPT-2": 100.0,
    # Sec. 5.2: "the magnitude of tokens generated with real data (which is 27.7)" for random GPT-2.
    "token radius, random GPT-2": 27.7,
}
UNMASKED_TWIN = {"minilm-decoder": "minilm", "bert-base-uncased-decoder": "bert-base-uncased"}
Map = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Grid:
    """Part II's models and grids in one profile (``quick``: offline stand-ins, fewer lengths, same layers)."""

    encoder: str
    decoder: str
    gpt2: str
    lengths: tuple[int, ...]
    ag_news_lengths: tuple[int, ...]
    per_length: int
    jump_lengths: tuple[int, ...]
    adversarial_lengths: tuple[int, ...]
    every_adversarial_layer: bool
    seeds: tuple[int, ...]

    def adversarial_layers(self, num_layers: int) -> list[int]:
        """Layers whose every head gets Sec. 5.2's input: all of them, or the first, middle and last (quick)."""
        if self.every_adversarial_layer:
            return list(range(num_layers))
        return sorted({0, num_layers // 2, num_layers - 1})


GRIDS = {
    "quick": Grid("minilm", "minilm-decoder", "gpt2-random", lengths=(4, 8, 16, 32, 64, 128),
                  ag_news_lengths=(4, 8, 16, 32, 64, 128), per_length=2,
                  jump_lengths=(64, 96, 128, 160, 192, 256, 384, 512),
                  adversarial_lengths=(2, 4, 8, 16, 32, 64, 97), every_adversarial_layer=False, seeds=(0, 1, 2)),
    "paper": Grid("bert-base-uncased", "bert-base-uncased-decoder", "gpt2-random",
                  lengths=tuple(range(2, 100, 2)), ag_news_lengths=tuple(range(2, 513, 10)), per_length=10,
                  jump_lengths=tuple(range(64, 513, 32)),
                  adversarial_lengths=tuple(range(2, 100, 5)), every_adversarial_layer=True, seeds=(0, 1, 2, 3, 4)),
}


def grid() -> Grid:
    """The :class:`Grid` of the active profile (:func:`lipnb.profiles.profile`)."""
    from .profiles import profile

    return GRIDS[profile().name]


def dataset_text(dataset: str) -> str:
    """Sec. 5.1's texts: *Alice in Wonderland*, or the first 1000 AG_NEWS test articles joined by spaces."""
    if dataset == "alice":
        return data.alice_text()
    if dataset == "ag_news":
        return " ".join(data.ag_news_texts()[:1000])
    raise ValueError(f"dataset must be one of {DATASETS}; got {dataset!r}")


def _random_gpt2(seed: int) -> nn.Module:
    """GPT-2 small with the random weights of ``torch.manual_seed(seed)`` (the global RNG is left untouched)."""
    from transformers import GPT2Config, GPT2Model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2Model(GPT2Config(attn_implementation="eager"))
    return model.eval().requires_grad_(False)


@lru_cache(maxsize=4)
def load_model(name: str) -> tuple[nn.Module, object]:
    """:func:`lipnb.models.load`, plus ``"gpt2-random:SEED"`` (random GPT-2 from another seed) and
    ``"llama-random"`` / ``"llama-random-norope"`` (:func:`lipnb.llama.random_llama`, its maps with or without
    rotary positions), both with GPT-2's tokenizer. Cached: do not modify the returned model."""
    if name.startswith("gpt2-random:"):
        _, tokenizer = models.load("gpt2-random")
        return _random_gpt2(int(name.split(":", 1)[1])), tokenizer
    if name in ("llama-random", "llama-random-norope"):
        model = llama.random_llama(0)
        model.config.rotary = name == "llama-random"
        return model, models.load("gpt2-random")[1]
    return models.load(name)


def num_layers(model: nn.Module) -> int:
    """Number of layers of a BERT, GPT-2 or Llama-style model."""
    return model.config.num_hidden_layers if llama.is_llama(model) else models.num_layers(model)


def is_decoder(model: nn.Module) -> bool:
    """Whether the model's attention is causal (Def 2.5); Llama-style models always are."""
    return llama.is_llama(model) or models.is_decoder(model)


def attention_inputs(model: nn.Module, layers: Sequence[int], input_ids: Tensor,
                     kind: str = "mha") -> dict[int, Tensor]:
    """:func:`lipnb.models.attention_inputs` for BERT and GPT-2, :func:`lipnb.llama.attention_inputs` for Llama."""
    if llama.is_llama(model):
        return llama.attention_inputs(model, layers, input_ids)
    return models.attention_inputs(model, list(layers), input_ids, kind)


def layer_map(model: nn.Module, layer: int, kind: str = "mha", *, head: int = 0,
              masked: bool | None = None) -> Map:
    """Layer ``layer``'s attention as the map ``kind`` (see the module docstring); ``masked`` overrides causality
    for ``"head"`` and ``"mha"`` (``None``: the model's own, Def 2.5)."""
    if kind not in MAP_KINDS:
        raise ValueError(f"kind must be one of {MAP_KINDS}; got {kind!r}")
    if llama.is_llama(model):
        if kind != "mha" or masked is False:
            raise ValueError("a Llama-style model has the causal kind='mha' map only")
        return llama.attention_map(model, layer, rotary=getattr(model.config, "rotary", True))
    causal = models.is_decoder(model) if masked is None else masked
    if kind in ("self", "block"):
        if causal != models.is_decoder(model):
            raise ValueError(f"kind={kind!r} runs the module as the model does; for the other masking load the "
                             "twin model (UNMASKED_TWIN) or use kind='mha'/'head'")
        return models.attention_map(model, layer, kind)
    heads = models.head_matrices(model, layer)
    if kind == "head":
        if not 0 <= head < heads.num_heads:
            raise ValueError(f"head must be in 0..{heads.num_heads - 1}; got {head}")
        heads = single_head(heads, head)
    return MultiHeadMap(heads, masked=causal)


def _measure(fn: Map, X: Tensor, estimator: str) -> Tensor:
    """``Lip_X(fn)`` for every input: Lanczos at relative residual ``1e-4`` (App. E.1) or the published loop."""
    if estimator == "lanczos":
        return local_lipschitz(fn, X, tol=1e-4).double()
    if estimator == "published":
        return published_estimator(fn, X).double()
    raise ValueError(f"estimator must be 'lanczos' or 'published'; got {estimator!r}")


def real_data_sweep(model_name: str, dataset: str, lengths: Iterable[int], per_length: int, *,
                    layers: Sequence[int] | None = None, kind: str = "mha", head: int = 0,
                    masked: bool | None = None, estimator: str = "lanczos") -> ResultTable:
    """Sec. 5.1: ``Lip_X`` and the token radius of every input of ``dataset`` at every layer (default: all).

    Inputs are :func:`lipnb.data.token_sequences` of the text (disjoint windows), captured where the map
    reads them. ``masked=False`` on a BERT decoder runs its activations through the unmasked twin
    (the published "masked BERT" call). Columns: ``model, dataset, layer, kind, head, masked, estimator,
    n, sequence, lip, radius`` (root mean square token norm, the published ``R``) and ``max_radius``.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "dataset": dataset, "lengths": lengths, "per_length": per_length,
              "layers": None if layers is None else list(layers), "kind": kind, "head": head, "masked": masked,
              "estimator": estimator}

    def compute() -> dict[str, list]:
        model, tokenizer = load_model(model_name)
        mapped = model
        if masked is False and model_name in UNMASKED_TWIN and kind in ("self", "block"):
            mapped = load_model(UNMASKED_TWIN[model_name])[0]
        causal = is_decoder(mapped) if masked is None or kind in ("self", "block") else masked
        chosen = list(range(num_layers(model))) if layers is None else list(layers)
        sequences = data.token_sequences(dataset_text(dataset), tokenizer, lengths, per_length)
        device = next(model.parameters()).device
        maps = {i: layer_map(mapped, i, kind, head=head, masked=causal) for i in chosen}
        input_kind = "block" if kind == "block" else "mha"
        rows = []
        for n in progress(lengths, desc=f"{model_name} {dataset} {kind}"):
            inputs = attention_inputs(model, chosen, sequences[n].to(device), input_kind)
            for i in chosen:
                X = inputs[i]
                lip = _measure(maps[i], X, estimator)
                norms = X.double().norm(dim=-1)
                rows.append(pd.DataFrame({
                    "model": model_name, "dataset": dataset, "layer": i, "kind": kind, "head": head,
                    "masked": causal, "estimator": estimator, "n": n, "sequence": range(len(X)),
                    "lip": lip.cpu().numpy(), "radius": norms.square().mean(1).sqrt().cpu().numpy(),
                    "max_radius": norms.amax(1).cpu().numpy()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("real_data_sweep", params, compute)


def token_radii(model_name: str, dataset: str, lengths: Iterable[int], per_length: int) -> pd.DataFrame:
    """Sec. 5.2 / App. C.5: the root mean square norm of the tokens entering every layer's attention, per sequence.

    Columns ``layer, n, sequence, radius``; one forward per length, no Jacobian (cheap, not cached).
    """
    model, tokenizer = load_model(model_name)
    layers = list(range(num_layers(model)))
    lengths = [int(n) for n in lengths]
    sequences = data.token_sequences(dataset_text(dataset), tokenizer, lengths, per_length)
    rows = []
    for n in lengths:
        inputs = attention_inputs(model, layers, sequences[n].to(next(model.parameters()).device))
        for i in layers:
            radius = inputs[i].double().norm(dim=-1).square().mean(1).sqrt()
            rows.append(pd.DataFrame({"layer": i, "n": n, "sequence": range(len(radius)),
                                      "radius": radius.cpu().numpy()}))
    return pd.concat(rows, ignore_index=True)


def adversarial_sweep(model_name: str, layer: int, lengths: Iterable[int], R: float, *,
                      heads: Sequence[int] | None = None, kinds: Sequence[str] = ("head", "mha"),
                      A_source: str = "head", estimator: str = "lanczos") -> ResultTable:
    """Sec. 5.2: ``Lip_X`` at Lemma C.7's input ``X`` built on head ``h``'s ``A`` at radius ``R``, ``n`` in ``lengths``.

    ``A_source``: ``"head"`` (the head's own, :func:`lipnb.models.head_matrices`) or ``"published"``
    (:func:`lipnb.published.published_A`). ``kinds``: the single head ``h`` and/or the whole layer.
    Columns: ``model, layer, head, kind, A_source, estimator, R, n, lip``.
    """
    from .inputs import lemma_c_7_input

    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "layer": layer, "lengths": lengths, "R": round(float(R), 6),
              "heads": None if heads is None else list(heads), "kinds": list(kinds), "A_source": A_source,
              "estimator": estimator}

    def compute() -> dict[str, list]:
        model, _ = load_model(model_name)
        p = next(model.parameters())
        H = model.config.num_attention_heads
        chosen = range(H) if heads is None else heads
        rows = []
        for h in progress(list(chosen), desc=f"{model_name} layer {layer} heads"):
            if A_source == "head":
                A = (llama.head_A(model, layer, h) if llama.is_llama(model)
                     else models.head_matrices(model, layer).A[h]).double()
            elif A_source == "published":
                A = published_A(model, layer, h).double()
            else:
                raise ValueError(f"A_source must be 'head' or 'published'; got {A_source!r}")
            X = lemma_c_7_input(A, float(R), max(lengths)).to(p)
            for kind in kinds:
                fn = layer_map(model, layer, kind, head=h)
                lip = torch.cat([_measure(fn, X[:, :n], estimator) for n in lengths])
                rows.append(pd.DataFrame({"model": model_name, "layer": layer, "head": h, "kind": kind,
                                          "A_source": A_source, "estimator": estimator, "R": float(R),
                                          "n": lengths, "lip": lip.cpu().numpy()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("adversarial_sweep", params, compute)


def real_data_table(g: Grid) -> pd.DataFrame:
    """Sec. 5.1 in full: :func:`real_data_sweep` of every layer of the grid's three models on both texts (``"mha"``)."""
    return pd.concat([real_data_sweep(name, dataset, lengths, g.per_length).frame
                      for name in (g.encoder, g.decoder, g.gpt2)
                      for dataset, lengths in (("alice", g.lengths), ("ag_news", g.ag_news_lengths))],
                     ignore_index=True)


def layer_radii(name: str, g: Grid) -> pd.Series:
    """Sec. 5.2's radius ``R_ℓ`` of every layer: the mean over Alice sequences of :func:`token_radii`."""
    return token_radii(name, "alice", g.lengths[-3:], g.per_length).groupby("layer").radius.mean()


def adversarial_layers(g: Grid) -> dict[str, list[int]]:
    """The layers whose every head is studied: the grid's choice for the encoder, and for the decoder and random
    GPT-2 the same in the ``paper`` profile, the middle layer in ``quick``."""
    chosen = {}
    for name in (g.encoder, g.decoder, g.gpt2):
        L = num_layers(load_model(name)[0])
        chosen[name] = g.adversarial_layers(L) if name == g.encoder or g.every_adversarial_layer else [L // 2]
    return chosen


def adversarial_table(g: Grid) -> pd.DataFrame:
    """Sec. 5.2 in full: :func:`adversarial_sweep` on every head of :func:`adversarial_layers`, at ``R_ℓ``."""
    rows = []
    for name, layers in adversarial_layers(g).items():
        radii = layer_radii(name, g)
        rows += [adversarial_sweep(name, layer, g.adversarial_lengths, float(radii[layer])).frame for layer in layers]
    return pd.concat(rows, ignore_index=True)


def growth_fits(table: pd.DataFrame | ResultTable, by: Sequence[str], *, x: str = "n", y: str = "lip") -> pd.DataFrame:
    """Sec. 5: ``y ≈ C x^α`` per group of ``by``: least-squares log-log slope ``α``, its bootstrap interval,
    ``C = e^intercept`` (Student interval when every length has one input), and :func:`power_law_break`'s
    verdict where there are enough lengths."""
    frame = table.frame if isinstance(table, ResultTable) else table
    rows = []
    for key, group in frame.groupby(list(by), sort=True):
        lx = torch.tensor(group[x].to_numpy(), dtype=torch.float64).log()
        ly = torch.tensor(group[y].to_numpy(), dtype=torch.float64).log()
        if group[x].nunique() == len(group):
            fit = fit_line(lx, ly)
            slope, low, high = fit.slope, fit.low, fit.high
        else:
            slope, low, high = bootstrap_slope(lx, ly, resamples=500)
        row = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        row.update(alpha=slope, low=low, high=high, C=math.exp(float(ly.mean() - slope * lx.mean())))
        if group[x].nunique() >= 6:
            verdict = power_law_break(group[x], group[y])
            row.update(break_n=verdict["break_n"], p_break=verdict["p"], jump=verdict["jump"],
                       slope_before=verdict["slope_before"], slope_after=verdict["slope_after"])
        rows.append(row)
    return pd.DataFrame(rows)


def position_aliasing(model: nn.Module, trained: int) -> pd.DataFrame:
    """For every learned position ``p >= trained``: the earlier position ``< trained`` whose embedding is the most
    similar (cosine) and that cosine, next to the cosine between ``p`` and ``p - 1``. BERT family only."""
    if not hasattr(getattr(model, "embeddings", None), "position_embeddings"):
        raise TypeError("position_aliasing needs a BERT-family model (learned absolute positions)")
    P = torch.nn.functional.normalize(model.embeddings.position_embeddings.weight.detach().double(), dim=1)
    if not 0 < trained < len(P):
        raise ValueError(f"trained must be in 1..{len(P) - 1}; got {trained}")
    cos = P[trained:] @ P[:trained].T
    best = cos.max(dim=1)
    positions = torch.arange(trained, len(P))
    return pd.DataFrame({"position": positions.numpy(), "alias": best.indices.numpy(),
                         "cosine": best.values.numpy(),
                         "neighbour_cosine": (P[trained:] * P[trained - 1:-1]).sum(1).numpy()})
