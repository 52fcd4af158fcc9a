"""Real text through real layers (Sec. 5.1, App. C.5): local constants and token radii of every layer, cached.

**The token radius** of a sequence is its root mean square token norm (:func:`token_radius`),
``(1/n Σ_i |x_i|²)^{1/2} = ||X||_F / √n``: the second moment of the empirical measure ``(1/n) Σ_i δ_{x_i}``,
which does not grow with ``n`` for tokens of one scale, and the ``R`` the paper's code reports (Sec. 5.2's 27.7
for random GPT-2). Theorem 3.3's ball ``B_R^n`` needs the largest token norm instead: the tables keep it as
``max_norm``, the radius of the smallest ball holding the sequence, not a second definition of the scale.

Every sweep returns one tidy :class:`~lipnb.results.ResultTable` (a row per measured input), cached as CSV keyed
by its parameters and a hash of lipnb's source. The map is a :data:`lipnb.models.MapKind`
(:func:`lipnb.models.attention_map` decides what it means in each model family); ``estimator`` is
``"lanczos"`` (the true local constant) or ``"published"`` (the paper's code, with the stopping rule of the
script that measured the model: :data:`_PUBLISHED_SCRIPT`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import pandas as pd
import torch
from torch import Tensor, nn

from .. import data, models
from ..arguments import check_bool, check_choice, check_lengths, check_positive_int, check_sequence, check_tokens
from ..core import bounds as _bounds
from ..core.attention import attention_matrix
from ..core.lipschitz import local_lipschitz
from ..paper.published import SCRIPT_SETTINGS, published_estimator
from ..profiles import Profile, check_profile
from ..results import ResultTable, cached_table, progress

__all__ = [
    "layer_radii",
    "measure",
    "position_aliasing",
    "real_text_sweep",
    "real_text_table",
    "token_radius",
]

def token_radius(X: Tensor) -> Tensor:
    """The token radius of each sequence of ``X`` ``(B, n, d)``: root mean square token norm, float64 ``(B,)``."""
    check_tokens(X)
    return X.double().norm(dim=-1).square().mean(-1).sqrt()


# The published script that measured each model on real text (its loop's threshold and cap: ``SCRIPT_SETTINGS``);
# the stand-ins run their original's script.
_PUBLISHED_SCRIPT: dict[str, str] = {
    "gpt2-random": "gpt2_random/compute_gpt_random.py",
    "gpt2": "gpt_2/compute_gpt.py",
    "bert-base-uncased": "bert_encoder/compute_bert_encoder.py",
    "minilm": "bert_encoder/compute_bert_encoder.py",
    "bert-base-uncased-decoder": "bert_decoder/compute_bert_decoder.py",
    "minilm-decoder": "bert_decoder/compute_bert_decoder.py",
}


def measure(fn: Callable[[Tensor], Tensor], X: Tensor, estimator: str, model_name: str | None = None) -> Tensor:
    """``Lip_X(fn)`` for every input: Lanczos at relative residual ``1e-4`` (App. E.1) or the published loop,
    with the threshold and cap of the script that measured ``model_name`` (``1e-4`` and 100 for other models)."""
    if estimator == "lanczos":
        return local_lipschitz(fn, X, tol=1e-4).double()
    if estimator == "published":
        script = _PUBLISHED_SCRIPT.get(model_name or "", "adversarial_data/toolbox.py")
        threshold, max_iter = SCRIPT_SETTINGS[script]
        return published_estimator(fn, X, threshold=threshold, max_iter=max_iter).double()
    raise ValueError(f"estimator must be 'lanczos' or 'published'; got {estimator!r}")


def real_text_sweep(model_name: str, dataset: str, lengths: Iterable[int], per_length: int, *,
                    layers: Sequence[int] | None = None, kind: models.MapKind = "mha", head: int | None = None,
                    masked: bool | None = None, estimator: str = "lanczos", bounds: bool = False) -> ResultTable:
    """Sec. 5.1: ``Lip_X`` and the token radius of every input of ``dataset`` at every layer (default: all).

    Inputs are :func:`lipnb.data.token_sequences` of the text (disjoint windows), captured where the map reads
    them; the model runs in float32, as in the paper. ``masked=False`` on a BERT decoder runs its activations
    through the unmasked twin (the published "masked BERT" call); any other ``masked`` that the map cannot honour
    is refused, so the table's ``masked`` is the masking measured. Arguments are checked before any work (the
    layers, lengths and head against the model once loaded, before a measurement). Columns: ``model, dataset,
    layer, kind, head`` (``kind="head"`` only, default head 0), ``masked, estimator, n, sequence, lip, radius``
    (:func:`token_radius`) and ``max_norm``; with ``bounds``
    (``kind="mha"``), also ``bound`` (Lemma 3.8 + Theorem E.3 at ``max_norm``), ``data_bound`` (Lemma 3.8 +
    Theorem C.3 at ``X``) and ``column_sum``, the largest ``Σ_i P_ij`` over tokens ``j`` and heads.
    """
    models.maps.check_model_name(model_name)
    check_choice(dataset, "dataset", data.DATASETS)
    lengths, per_length = check_lengths(lengths), check_positive_int(per_length, "per_length")
    layers = None if layers is None else [check_positive_int(i, "each of layers", 0) for i in
                                          check_sequence(layers, "layers")]
    models.maps.check_kind(kind)
    if kind == "head":
        head = check_positive_int(0 if head is None else head, "head", 0)
    elif head is not None:
        raise ValueError(f"head is only for kind='head'; kind={kind!r} measures the whole layer (got head={head!r})")
    masked = None if masked is None else check_bool(masked, "masked")
    check_choice(estimator, "estimator", ("lanczos", "published"))
    if check_bool(bounds, "bounds") and kind != "mha":
        raise ValueError(f"bounds=True needs kind='mha' (the map the theorems bound); got {kind!r}")
    params = {"model": model_name, "dataset": dataset, "lengths": lengths, "per_length": per_length,
              "layers": None if layers is None else list(layers), "kind": kind, "head": head, "masked": masked,
              "estimator": estimator, "bounds": bounds}

    def compute() -> dict[str, list]:
        model, tokenizer = models.load_shared(model_name)
        check_lengths(lengths, maximum=model.config.max_position_embeddings)
        mapped = model
        if masked is False and model_name in models.UNMASKED_TWIN and kind in models.maps.MODULE_KINDS:
            mapped = models.load_shared(models.UNMASKED_TWIN[model_name])[0]
        causal = models.is_decoder(mapped) if masked is None else masked
        chosen = list(range(models.num_layers(model))) if layers is None else layers
        sequences = data.token_sequences(data.dataset_text(dataset), tokenizer, lengths, per_length)
        device = next(model.parameters()).device
        maps = {i: models.attention_map(mapped, i, kind, head=head, masked=causal) for i in chosen}
        rows = []
        for n in progress(lengths, desc=f"{model_name} {dataset} {kind}"):
            inputs = models.attention_inputs(model, chosen, sequences[n].to(device), kind)
            for i in chosen:
                X = inputs[i]
                norms = X.double().norm(dim=-1)
                row = {"model": model_name, "dataset": dataset, "layer": i, "kind": kind,
                       **({"head": head} if kind == "head" else {}), "masked": causal, "estimator": estimator,
                       "n": n, "sequence": range(len(X)),
                       "lip": measure(maps[i], X, estimator, model_name).cpu().numpy(),
                       "radius": token_radius(X).cpu().numpy(),
                       "max_norm": norms.amax(1).cpu().numpy()}
                if bounds:
                    row.update(_bound_columns(mapped, i, X, causal))
                rows.append(pd.DataFrame(row))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("real_text_sweep", params, compute)


def _bound_columns(model: nn.Module, layer: int, X: Tensor, masked: bool) -> dict[str, object]:
    """Theorem E.3's and C.3's bounds (Lemma 3.8) and the largest column sum of ``P`` at each input of ``X``."""
    heads = models.head_matrices(model, layer)
    X = X.double()
    norms = X.norm(dim=-1)
    P = attention_matrix(X, heads.A.double(), score_bias=heads.score_bias.double(), masked=masked)
    return {"bound": _bounds.multihead_bound(heads, norms.amax(1), X.shape[1]).cpu().numpy(),
            "data_bound": _bounds.multihead_data_bound(X, heads, masked=masked).cpu().numpy(),
            "column_sum": P.sum(-2).flatten(1).amax(1).cpu().numpy()}


def _token_radii(model_name: str, dataset: str, lengths: Iterable[int], per_length: int) -> ResultTable:
    """Sec. 5.2 / App. C.5: the :func:`token_radius` of every sequence entering every layer's attention.

    Columns ``layer, n, sequence, radius``; one forward per length, no Jacobian (cheap, cached).
    """
    models.maps.check_model_name(model_name)
    check_choice(dataset, "dataset", data.DATASETS)
    lengths, per_length = check_lengths(lengths), check_positive_int(per_length, "per_length")
    params = {"model": model_name, "dataset": dataset, "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, list]:
        model, tokenizer = models.load_shared(model_name)
        check_lengths(lengths, maximum=model.config.max_position_embeddings)
        layers = list(range(models.num_layers(model)))
        sequences = data.token_sequences(data.dataset_text(dataset), tokenizer, lengths, per_length)
        rows = []
        for n in lengths:
            inputs = models.attention_inputs(model, layers, sequences[n].to(next(model.parameters()).device))
            for i in layers:
                radius = token_radius(inputs[i])
                rows.append(pd.DataFrame({"layer": i, "n": n, "sequence": range(len(radius)),
                                          "radius": radius.cpu().numpy()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("token_radii", params, compute)


def layer_radii(model_name: str, lengths: Iterable[int], per_length: int, dataset: str = "alice") -> pd.Series:
    """Sec. 5.2's radius ``R_ℓ`` of every layer: the mean :func:`token_radius` over the sequences of ``lengths``."""
    return _token_radii(model_name, dataset, lengths, per_length).frame.groupby("layer").radius.mean()


def real_text_table(p: Profile) -> ResultTable:
    """Sec. 5.1 in full: :func:`real_text_sweep` of every layer of the profile's three models on both texts."""
    check_profile(p)
    tables = [real_text_sweep(name, dataset, lengths, p.text_per_length)
              for name in (p.encoder, p.decoder, p.gpt2)
              for dataset, lengths in (("alice", p.alice_lengths), ("ag_news", p.ag_news_lengths))]
    return ResultTable(pd.concat([t.frame for t in tables], ignore_index=True),
                       {"sweep": "real_text_table", "profile": p.name, "parts": [t.provenance for t in tables]})


def position_aliasing(model: nn.Module, trained: int, *, start: int | None = None, gap: int = 0) -> pd.DataFrame:
    """For every learned position ``p >= start`` (default ``trained``): the tuned position ``q < trained`` with
    ``|p - q| > gap`` whose embedding is the most similar (cosine) and that cosine, next to the cosine between
    ``p`` and ``p - 1``; ``tuned`` marks ``p < trained``. BERT family only."""
    if not hasattr(getattr(model, "embeddings", None), "position_embeddings"):
        raise TypeError("position_aliasing needs a BERT-family model (learned absolute positions)")
    trained, gap = check_positive_int(trained, "trained"), check_positive_int(gap, "gap", 0)
    start = None if start is None else check_positive_int(start, "start")
    P = torch.nn.functional.normalize(model.embeddings.position_embeddings.weight.detach().double(), dim=1)
    if not 0 < trained < len(P):
        raise ValueError(f"trained must be in 1..{len(P) - 1}; got {trained}")
    start = trained if start is None else start
    if not 0 < start < len(P):
        raise ValueError(f"start must be in 1..{len(P) - 1}; got {start}")
    if gap < 0:
        raise ValueError(f"gap must be >= 0; got {gap}")
    positions = torch.arange(start, len(P))
    near = (positions[:, None] - torch.arange(trained)[None, :]).abs() <= gap
    best = (P[start:] @ P[:trained].T).masked_fill(near, -torch.inf).max(dim=1)
    return pd.DataFrame({"position": positions.numpy(), "tuned": (positions < trained).numpy(),
                         "alias": best.indices.numpy(), "cosine": best.values.numpy(),
                         "neighbour_cosine": (P[start:] * P[start - 1:-1]).sum(1).numpy()})
