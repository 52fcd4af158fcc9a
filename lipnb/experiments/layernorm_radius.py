"""Where normalized tokens live, and the normalization absorbed into attention (Sec. 2.3; chapters *Normalization
fixes the radius* and *Absorbing the normalization into attention*): every token entering every attention layer of a
real encoder against its LayerNorm's ellipsoid and radius, the LayerNorm absorbed into the layer's heads, and the
bounds of Theorem 3.3 before and after absorbing a gain."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import torch
from torch import Tensor

from .. import data, models
from ..arguments import check_positive_int, check_tokens
from ..core.attention import multihead_attention, self_attention
from ..core.bounds import theorem_3_3
from ..core.dense import exact_local_lipschitz
from ..core.normalization import (
    absorb_normalization,
    normalization_radius,
    normalization_radius_bound,
    normalize_tokens,
)
from ..results import ResultTable, cached_table, code_version, progress

__all__ = ["absorbed_bound_table", "layernorm_absorption_errors", "layernorm_token_table", "normalization_windows"]

# AG_NEWS articles read for the windows (the first ones of the test split)
AG_NEWS_ARTICLES = 200


def normalization_windows(tokenizer: object, n: int, per_length: int) -> Tensor:
    """The text of both chapters: ``per_length`` windows of ``n`` tokens of *Alice*, then ``per_length`` of AG_NEWS
    (its first 200 articles joined), as token ids ``(2 per_length, n)``."""
    n, per_length = check_positive_int(n, "n", 2), check_positive_int(per_length, "per_length")
    alice = data.token_sequences(data.alice_text(), tokenizer, [n], per_length)[n]
    news = " ".join(data.ag_news_texts()[:AG_NEWS_ARTICLES])
    return torch.cat([alice, data.token_sequences(news, tokenizer, [n], per_length)[n]])


def _float64_model(model_name: str) -> tuple[torch.nn.Module, object, int]:
    """The model on the CPU in float64, its tokenizer and its number of layers."""
    models.maps.check_model_name(model_name)
    model, tokenizer = models.load(model_name, device="cpu")
    return model.double(), tokenizer, models.num_layers(model)


def layernorm_token_table(model_name: str, n: int = 64, per_length: int = 3) -> ResultTable:
    """Sec. 2.3 on a real encoder in float64: every token entering each layer's attention against its LayerNorm.

    One row per ``layer``, ``sequence`` and ``token`` of :func:`normalization_windows`: ``norm`` ``|y|`` of the
    attention input ``y``; for the normalized token ``z = (y - β)/γ``, ``z_mean`` (its mean), ``norm_gap``
    (``|z|²/d - σ²/(σ²+ε)``, ``σ²`` the variance of the LayerNorm's input), ``ratio_gap`` (``|z|/√d - 1``) and
    ``eps_gap`` (``ε/(2σ²)``); ``input_gap``, the largest ``|y - LayerNorm(x)|`` (the attention input is the
    LayerNorm's output); and per layer ``radius`` (``R(γ, β)``, :func:`~lipnb.core.normalization.normalization_radius`)
    and ``simple`` (``√d max|γ| + |β|``). A cached table.
    """
    n, per_length = check_positive_int(n, "n", 2), check_positive_int(per_length, "per_length")
    params = {"model": model_name, "n": n, "per_length": per_length, "ag_news_articles": AG_NEWS_ARTICLES}

    def compute() -> dict[str, list]:
        model, tokenizer, L = _float64_model(model_name)
        ids = normalization_windows(tokenizer, n, per_length)
        acts = models.layernorm_activations(model, range(L), ids)
        inputs = models.attention_inputs(model, list(range(L)), ids)
        rows = []
        for layer in progress(range(L), desc="layernorm"):
            (x, y), ln = acts[layer], models.attention_layernorm(model, layer)
            d = y.shape[-1]
            z = (y - ln.bias) / ln.weight
            var = x.var(-1, unbiased=False)
            B, T = y.shape[:2]
            rows.append(pd.DataFrame({
                "layer": layer, "sequence": torch.arange(B).repeat_interleave(T).numpy(),
                "token": torch.arange(T).repeat(B).numpy(), "norm": inputs[layer].norm(dim=-1).flatten().numpy(),
                "z_mean": z.mean(-1).flatten().numpy(),
                "norm_gap": (z.square().sum(-1) / d - var / (var + ln.eps)).flatten().numpy(),
                "ratio_gap": (z.norm(dim=-1) / d**0.5 - 1).flatten().numpy(),
                "eps_gap": (ln.eps / (2 * var)).flatten().numpy(),
                "input_gap": (y - inputs[layer]).abs().amax(-1).flatten().numpy(),
                "radius": normalization_radius(ln.weight, ln.bias)[0].item(),
                "simple": normalization_radius_bound(ln.weight, ln.bias).item()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("layernorm_token_table", params, compute)


def layernorm_absorption_errors(model_name: str, n: int = 64, per_length: int = 3) -> ResultTable:
    """Sec. 2.3, the LayerNorm absorbed into each layer's heads (biases included), in float64: per ``layer``, the
    relative ``error`` between the layer's multi-head attention on the LayerNorm outputs ``y`` and the absorbed
    heads on the normalized tokens ``z`` recomputed from the LayerNorm's inputs, over :func:`normalization_windows`.
    A cached table."""
    n, per_length = check_positive_int(n, "n", 2), check_positive_int(per_length, "per_length")
    params = {"model": model_name, "n": n, "per_length": per_length, "ag_news_articles": AG_NEWS_ARTICLES}

    def compute() -> dict[str, list]:
        model, tokenizer, L = _float64_model(model_name)
        acts = models.layernorm_activations(model, range(L), normalization_windows(tokenizer, n, per_length))
        errors = []
        for layer in progress(range(L), desc="absorption"):
            (x, y), ln = acts[layer], models.attention_layernorm(model, layer)
            heads = models.head_matrices(model, layer)
            z = normalize_tokens(x, center=True, eps=ln.eps)
            direct = multihead_attention(y, heads)
            absorbed = multihead_attention(z, absorb_normalization(heads, ln.weight, ln.bias))
            errors.append(((direct - absorbed).norm() / direct.norm()).item())
        return {"layer": list(range(L)), "error": errors}

    return cached_table("layernorm_absorption_errors", params, compute)


def absorbed_bound_table(A: Tensor, V: Tensor, Z: Tensor, gains: Mapping[str, Tensor]) -> ResultTable:
    """Sec. 2.3 with Theorem 3.3: an RMSNorm gain ``γ`` absorbed into one head ``(A, V)``, at normalized tokens ``Z``
    ``(B, n, d)`` on the sphere of radius ``√d``.

    One row per gain (``gain``, its name) and input: ``g`` (``max|γ|``), ``absorbed`` (Theorem 3.3 for
    ``(DAD, VD)`` at radius ``√d``), ``direct`` (Theorem 3.3 for ``(A, V)`` at the radius ``√d max|γ|`` of the gain's
    outputs), the dense local constants ``lip_z`` of ``Z ↦ f_{DAD,VD}(Z)``, ``lip_chain`` of ``Z ↦ f_{A,V}(DZ)`` and
    ``lip_y`` of ``f_{A,V}`` at ``DZ``, and ``constant`` (1 when every entry of the gain is the same). Not cached.
    """
    check_tokens(Z, "Z")
    if not isinstance(gains, Mapping) or not gains:
        raise TypeError("gains must be a non-empty mapping of names to gain vectors")
    B, n, d = Z.shape
    A, V, Z = A.double(), V.double(), Z.double()
    columns: dict[str, list] = {k: [] for k in ("gain", "input", "g", "absorbed", "direct", "lip_z", "lip_chain",
                                                "lip_y", "constant")}
    for name, gain in gains.items():
        gain = torch.as_tensor(gain, dtype=torch.float64)
        if gain.shape != (d,):
            raise ValueError(f"gain {name!r} must have shape ({d},); got {tuple(gain.shape)}")
        A_abs, V_abs = gain[:, None] * A * gain, V * gain
        lip_z = exact_local_lipschitz(lambda W, A_abs=A_abs, V_abs=V_abs: self_attention(W, A_abs, V_abs), Z)
        lip_chain = exact_local_lipschitz(lambda W, gain=gain: self_attention(W * gain, A, V), Z)
        lip_y = exact_local_lipschitz(lambda W: self_attention(W, A, V), Z * gain)
        columns["gain"] += [str(name)] * B
        columns["input"] += list(range(B))
        columns["g"] += [gain.abs().max().item()] * B
        columns["absorbed"] += [theorem_3_3(A_abs, V_abs, d**0.5, n).item()] * B
        columns["direct"] += [theorem_3_3(A, V, normalization_radius_bound(gain), n).item()] * B
        columns["lip_z"] += lip_z.tolist()
        columns["lip_chain"] += lip_chain.tolist()
        columns["lip_y"] += lip_y.tolist()
        columns["constant"] += [int(bool((gain == gain[0]).all()))] * B
    provenance = {"sweep": "absorbed_bound_table", "shape": list(Z.shape), "gains": list(map(str, gains)),
                  "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)
