"""What ``Q4_1`` rounding (SmolLM2's 4-bit weights) does to attention, measured where the unrounded weights are at hand:
a model's query, key, value and output projections sent through ``gguf``'s quantiser and back
(:func:`lipnb.models.quantized_attention`), and ``Lip_X`` of every layer and Prop. 3.4's ``γ_h`` of every head
before and after. Cached :class:`~lipnb.results.ResultTable` s.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .. import data, models
from ..arguments import check_lengths, check_positive_int
from ..core.inputs import head_spectra
from ..core.lipschitz import local_lipschitz
from ..models.quantization import attention_linears, quantized_attention
from ..results import ResultTable, cached_table, progress

__all__ = ["q4_1_effect", "q4_1_heads"]


def _pair(model_name: str) -> tuple[torch.nn.Module, torch.nn.Module, object]:
    """The model in float64, its twin with ``Q4_1``-rounded attention projections, and its tokenizer."""
    model, tokenizer = models.load(model_name)
    model = model.double()
    return model, quantized_attention(model), tokenizer


def q4_1_effect(model_name: str = "minilm", lengths: Iterable[int] = (8, 32, 128), per_length: int = 2,
                dataset: str = "alice") -> ResultTable:
    """``Lip_X`` of every layer's attention (Def 2.2, float64, relative residual ``1e-6``) before and after ``Q4_1``
    rounding of its projections, on the tokens the unrounded model feeds each layer on ``per_length`` windows of
    ``dataset`` at each length: the same inputs, so the difference is the attention map's alone. Columns
    ``layer, n, sequence, before, after``."""
    models.maps.check_model_name(model_name)
    lengths, per_length = check_lengths(lengths, minimum=2), check_positive_int(per_length, "per_length")
    params = {"model": model_name, "lengths": lengths, "per_length": per_length, "dataset": dataset}

    def compute() -> dict[str, list]:
        model, rounded, tokenizer = _pair(model_name)
        windows = data.token_sequences(data.dataset_text(dataset), tokenizer, lengths, per_length)
        layers = list(range(models.num_layers(model)))
        rows: dict[str, list] = {"layer": [], "n": [], "sequence": [], "before": [], "after": []}
        for n in progress(lengths, desc=f"{model_name} Q4_1"):
            captured = models.attention_inputs(model, layers, windows[n])
            for layer, X in captured.items():
                before = local_lipschitz(models.attention_map(model, layer), X, tol=1e-6)
                after = local_lipschitz(models.attention_map(rounded, layer), X, tol=1e-6)
                rows["layer"] += [layer] * len(X)
                rows["n"] += [n] * len(X)
                rows["sequence"] += list(range(len(X)))
                rows["before"] += before.tolist()
                rows["after"] += after.tolist()
        return rows

    return cached_table("q4_1_effect", params, compute)


def q4_1_heads(model_name: str = "minilm") -> ResultTable:
    """Prop. 3.4's ``γ_h`` of every head before and after ``Q4_1`` rounding of the attention projections, and the
    largest relative Frobenius error the rounding makes in any projection weight. Columns ``layer, head,
    gamma_before, gamma_after, weight_error`` (the last the same on every row)."""
    models.maps.check_model_name(model_name)

    def compute() -> dict[str, list]:
        model, rounded, _ = _pair(model_name)
        error = max(float((a.weight - b.weight).norm() / a.weight.norm())
                    for a, b in zip(attention_linears(model), attention_linears(rounded), strict=True))
        rows: dict[str, list] = {"layer": [], "head": [], "gamma_before": [], "gamma_after": [], "weight_error": []}
        for layer in range(models.num_layers(model)):
            before, after = (head_spectra(models.head_matrices(m, layer).A.double()).gamma for m in (model, rounded))
            rows["layer"] += [layer] * len(before)
            rows["head"] += list(range(len(before)))
            rows["gamma_before"] += before.tolist()
            rows["gamma_after"] += after.tolist()
            rows["weight_error"] += [error] * len(before)
        return rows

    return cached_table("q4_1_heads", {"model": model_name}, compute)
