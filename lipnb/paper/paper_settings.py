"""The exact settings of the paper's published scripts (``vcastin/how-smooth-is-attention``) and the maps they ran.

Every constant names the script and line it comes from. The random GPT-2 of the scripts is drawn by
``torch.manual_seed(seed)`` then ``GPT2Model(GPT2Config())``: the installed ``transformers`` draws the same
weights as the pinned 4.37.2 (``tests/paper/test_published.py`` pins them), so those settings run here exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from transformers import GPT2Config, GPT2Model

from .. import data, models
from ..arguments import check_positive_int
from ..core.attention import causal_mask
from ..core.inputs import lemma_c_7_input
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table
from .paper_numbers import number, value
from .published import SCRIPT_SETTINGS, published_A, published_closed_form, published_estimator

__all__ = ["ADVERSARIAL_RANDOM_GPT2", "CORRECTIONS", "REAL_DATA_RANDOM_GPT2", "AdversarialSetting", "Correction",
           "RealDataSetting", "decoder_output_tuple_map", "paper_random_gpt2", "random_gpt2_adversarial_panel",
           "random_gpt2_attention", "random_gpt2_real_data_panel", "training_inputs"]

Map = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class AdversarialSetting:
    """A panel of ``adversarial_data/adversarial.py``: model seed, layer, head, ``R``, lengths, drawn C."""

    seed: int
    layer: int
    head: int
    R: float
    lengths: tuple[int, ...]
    drawn_C: float
    script: str


@dataclass(frozen=True)
class RealDataSetting:
    """The real-data run of ``gpt2_random/process_gpt_random.py`` and ``compute_gpt_random.py``."""

    seed: int
    layer: int
    lengths: tuple[int, ...]
    per_length: int
    script: str


# Read from the table of published numbers (lipnb.paper.paper_numbers), where each value names its script and line.
ADVERSARIAL_RANDOM_GPT2 = AdversarialSetting(
    seed=int(value("adv-seed-random-gpt2")), layer=int(value("adv-layer-random-gpt2")),
    head=int(value("adv-head-random-gpt2")), R=value("adv-R-random-gpt2"),
    lengths=tuple(int(n) for n in number("adv-lengths").value), drawn_C=value("drawn-adv-random-gpt2"),
    script="adversarial_data/toolbox.py")
REAL_DATA_RANDOM_GPT2 = RealDataSetting(
    seed=int(value("real-seed-random-gpt2")), layer=int(value("real-layer-random-gpt2")),
    lengths=tuple(int(n) for n in number("real-lengths").value), per_length=int(value("real-per-length")),
    script="gpt2_random/compute_gpt_random.py")


def paper_random_gpt2(seed: int, attn_implementation: str = "eager") -> nn.Module:
    """``torch.manual_seed(seed); GPT2Model(GPT2Config())`` as the scripts draw it, left in training mode as they
    leave it (frozen parameters); the global RNG is left untouched."""

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2Model(GPT2Config(attn_implementation=attn_implementation))
    return model.requires_grad_(False)


def random_gpt2_attention(model: nn.Module, layer: int) -> Map:
    """``GPT2Attention(X)[0]`` as the scripts called it under 4.37.2: causal (its own buffer then, passed here),
    in whatever mode the model is (training mode: dropout drawn afresh at every call)."""
    attn = model.h[layer].attn
    return lambda X: attn(X, attention_mask=causal_mask(X))[0]


def training_inputs(model: nn.Module, layer: int, input_ids: Tensor) -> Tensor:
    """The input of block ``layer``'s attention (``ln_1`` output) in a forward in the model's current mode, as the
    published forward hook captured it (training mode: dropout in the embeddings and earlier blocks)."""
    return models.maps.capture_inputs(model, input_ids, {layer: model.h[layer].attn})[layer]


def decoder_output_tuple_map(model: nn.Module, layer: int) -> Map:
    """What ``loc_lipschitz`` differentiated in the BERT-decoder adversarial panel: ``BertSelfAttention``'s whole
    output under 4.37.2 (``modeling_bert.py`` l.322, l.373-374), ``(context, (key, value))``, unmasked, as one
    ``(B, 3n, d)`` tensor (context, then the key and value projections token by token)."""
    if models.family(model) != "bert" or not models.is_decoder(model):
        raise TypeError("decoder_output_tuple_map needs a BERT decoder (is_decoder=True)")
    sa = models.layer_module(model, layer).attention.self

    def fn(X: Tensor) -> Tensor:
        return torch.cat([sa(X)[0], sa.key(X), sa.value(X)], dim=1)

    return fn


Correction = Literal["estimator", "matrix", "map"]
# What each correction of the random-GPT-2 adversarial panel changes (chapter "What the published code measured").
CORRECTIONS: dict[str, str] = {
    "estimator": "the true local constant (Lanczos, relative residual 1e-4) instead of the published loop",
    "matrix": "the head's own A_h instead of compute_A's slice of the Conv1D weight",
    "map": "head 0 alone instead of the whole layer",
}


def random_gpt2_adversarial_panel(corrected: Sequence[Correction] = ()) -> ResultTable:
    """Sec. 5.2's random-GPT-2 panel run as published, with the defects named in ``corrected`` (any of
    :data:`CORRECTIONS`) corrected; one input per length, columns ``n`` and ``lip``; cached."""
    if isinstance(corrected, str) or any(c not in CORRECTIONS for c in corrected):
        raise ValueError(f"corrected must be a sequence of {sorted(CORRECTIONS)}; got {corrected!r}")
    chosen = sorted(set(corrected))
    s = ADVERSARIAL_RANDOM_GPT2

    def compute() -> dict[str, object]:
        model = paper_random_gpt2(s.seed).eval()   # get_lipschitz_list calls model.eval() (toolbox.py:156)
        A = (models.head_matrices(model, s.layer).A[s.head] if "matrix" in chosen
             else published_A(model, s.layer, s.head))
        fn = (models.attention_map(model, s.layer, "head", head=s.head) if "map" in chosen
              else random_gpt2_attention(model, s.layer))
        X = lemma_c_7_input(A.double(), s.R, max(s.lengths)).float()
        threshold, max_iter = SCRIPT_SETTINGS[s.script]
        lips = [local_lipschitz(fn, X[:, :n], tol=1e-4) if "estimator" in chosen
                else published_estimator(fn, X[:, :n], threshold=threshold, max_iter=max_iter) for n in s.lengths]
        return {"n": list(s.lengths), "lip": torch.cat(lips).double()}

    return cached_table("paper-adversarial-random-gpt2", {"corrected": chosen}, compute)


def random_gpt2_real_data_panel(lengths: Sequence[int]) -> ResultTable:
    """Sec. 5.1 on the paper's random GPT-2 (seed 0, layer 6, Alice, eval mode) at ``lengths``: per input, the
    published loop's eval-mode value ``√‖Jᵀ f(X)‖`` and the true local constant (columns ``n``, ``sequence``,
    ``estimator`` ∈ {``published``, ``lanczos``}, ``lip``); cached."""
    if isinstance(lengths, (str, int)) or not lengths:
        raise ValueError(f"lengths must be a non-empty sequence of ints; got {lengths!r}")
    grid = [check_positive_int(n, "lengths", minimum=2) for n in lengths]
    s = REAL_DATA_RANDOM_GPT2

    def compute() -> dict[str, object]:
        model, tokenizer = models.load_shared("gpt2-random")   # seed 0, eval mode: the scripts' model
        ids = data.token_sequences(data.dataset_text("alice"), tokenizer, grid, s.per_length)
        fn = random_gpt2_attention(model, s.layer)
        columns: dict[str, list] = {"n": [], "sequence": [], "estimator": [], "lip": []}
        for n in grid:
            X = training_inputs(model, s.layer, ids[n])
            for name, lip in (("published", published_closed_form(fn, X)),
                              ("lanczos", local_lipschitz(fn, X, tol=1e-4))):
                columns["n"] += [n] * len(X)
                columns["sequence"] += list(range(len(X)))
                columns["estimator"] += [name] * len(X)
                columns["lip"] += lip.double().tolist()
        return columns

    return cached_table("paper-real-data-random-gpt2", {"lengths": grid}, compute)
