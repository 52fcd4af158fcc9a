"""The published code's runs, re-run beside the intended computation (Sec. 5 and App. E.1 of Castin et al.).

What the chapters *What the published code measured* and *The published real-data runs* measure: the random-GPT-2
adversarial panel with its defects corrected one or more at a time (:func:`adversarial_corrections`), the
published loop against the true local constant on real text (:func:`estimators_on_real_text`), the loop's
first-step stops (:func:`published_loop_runs`, :func:`random_gpt2_loop_runs`) and its runs with dropout left on
(:func:`dropout_runs`), the BERT-decoder panel's differentiated output tuple (:func:`decoder_tuple_panel`), one
layer measured as several maps (:func:`layer_map_variants`) and what an attention module masks when it is given no mask
(:func:`module_mask_distances`). The sweeps are cached (:func:`lipnb.results.cached_table`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import torch
from torch import Tensor, nn

from .. import data, models
from ..arguments import check_choice, check_lengths, check_positive_int, check_sequence
from ..core.inputs import lemma_c_7_input
from ..core.lipschitz import local_lipschitz
from ..paper.paper_settings import (
    ADVERSARIAL_RANDOM_GPT2,
    REAL_DATA_RANDOM_GPT2,
    Correction,
    decoder_output_tuple_map,
    random_gpt2_adversarial_panel,
    random_gpt2_attention,
    training_inputs,
)
from ..paper.published import (
    SCRIPT_SETTINGS,
    first_step_stop_probability,
    published_A,
    published_closed_form,
    published_estimator,
    published_run,
)
from ..profiles import Profile, check_profile
from ..results import ResultTable, cached_table, progress
from .real_text import real_text_sweep

__all__ = ["ADVERSARIAL_PANEL_SETTINGS", "PAPER_REAL_DATA_MAPS", "adversarial_corrections", "decoder_tuple_panel",
           "dropout_runs", "estimators_on_real_text", "layer_map_variants", "module_mask_distances",
           "published_loop_runs", "random_gpt2_loop_runs"]

Map = Callable[[Tensor], Tensor]

# The random-GPT-2 adversarial panel's settings: a name, then the defects of the published code it corrects.
ADVERSARIAL_PANEL_SETTINGS: dict[str, tuple[Correction, ...]] = {
    "as published": (),
    "estimator corrected": ("estimator",),
    "matrix corrected": ("matrix",),
    "map corrected (head 0 alone)": ("map",),
    "matrix and estimator corrected": ("estimator", "matrix"),
    "all three corrected": ("estimator", "map", "matrix"),
}

# The map each real-data script differentiated, by the profile's role of the model: BERT's block (self-attention,
# output projection, residual, LayerNorm), unmasked for the "masked BERT" decoder, GPT-2's attention module.
PAPER_REAL_DATA_MAPS: dict[str, tuple[models.MapKind, bool | None]] = {
    "encoder": ("block", None),
    "decoder": ("block", False),
    "gpt2": ("self", None),
}

# The threshold of the published scripts other than random GPT-2's real-data one (App. E.1's stopping test).
OTHER_THRESHOLD = SCRIPT_SETTINGS[ADVERSARIAL_RANDOM_GPT2.script][0]


def adversarial_corrections(settings: Sequence[str] | None = None) -> pd.DataFrame:
    """Sec. 5.2's random-GPT-2 panel in each of ``settings`` (default: all of :data:`ADVERSARIAL_PANEL_SETTINGS`),
    one input per length: columns ``setting``, ``n``, ``lip`` and ``C_n = lip / √n`` (each panel cached)."""
    chosen = list(ADVERSARIAL_PANEL_SETTINGS) if settings is None else check_sequence(settings, "settings")
    for name in chosen:
        check_choice(name, "each of settings", ADVERSARIAL_PANEL_SETTINGS)
    frames = [random_gpt2_adversarial_panel(ADVERSARIAL_PANEL_SETTINGS[name]).frame.assign(setting=name)
              for name in chosen]
    panel = pd.concat(frames, ignore_index=True)[["setting", "n", "lip"]]
    return panel.assign(C_n=panel.lip / panel.n**0.5)


def estimators_on_real_text(p: Profile, *, lengths: Sequence[int] | None = None,
                            per_length: int | None = None) -> pd.DataFrame:
    """Sec. 5.1's real-data runs of each of the profile's models at its middle layer on *Alice*, on the map its
    script differentiated (:data:`PAPER_REAL_DATA_MAPS`), measured by the published loop and by Lanczos: the rows
    of both :func:`~lipnb.experiments.real_text.real_text_sweep` tables (default grid: the profile's)."""
    check_profile(p)
    grid = check_lengths(p.alice_lengths if lengths is None else lengths)
    count = check_positive_int(p.text_per_length if per_length is None else per_length, "per_length")
    frames = []
    for role, (kind, masked) in PAPER_REAL_DATA_MAPS.items():
        name = getattr(p, role)
        middle = models.num_layers(models.load_shared(name)[0]) // 2
        frames += [real_text_sweep(name, "alice", grid, count, layers=[middle], kind=kind, masked=masked,
                                   estimator=estimator).frame for estimator in ("published", "lanczos")]
    return pd.concat(frames, ignore_index=True)


def published_loop_runs(fn: Map, inputs: Mapping[int, Tensor], *, threshold: float, max_iter: int) -> pd.DataFrame:
    """App. E.1 as published on every input of ``inputs`` (``{n: (B, n, d)}``), one row per input: the loop's
    value (``run``), whether it stopped at its first step, whether it returned NaN, the probability of a first-step
    stop at ``threshold`` and at the other scripts' ``1e-4``, the value it converges to (``published``,
    ``√‖Jᵀ f(X)‖``), the true local constant (``lanczos``, relative residual ``1e-4``) and the smallest token
    norm (``min_norm``)."""
    threshold = float(threshold)
    max_iter = check_positive_int(max_iter, "max_iter")
    rows = []
    for n, X in inputs.items():
        run = published_run(fn, X, threshold=threshold, max_iter=max_iter)
        size = X[0].numel()
        rows.append(pd.DataFrame({
            "n": n, "sequence": range(len(X)),
            "p_stop": first_step_stop_probability(run.first_norm, size, threshold).numpy(),
            "p_stop_other": first_step_stop_probability(run.first_norm, size, OTHER_THRESHOLD).numpy(),
            "stopped": (run.steps == 1).numpy(), "nan": run.value.isnan().numpy(),
            "run": run.value.double().numpy(), "published": published_closed_form(fn, X).double().numpy(),
            "lanczos": local_lipschitz(fn, X, tol=1e-4).double().numpy(),
            "min_norm": X.double().norm(dim=-1).amin(1).numpy()}))
    return pd.concat(rows, ignore_index=True)


def random_gpt2_loop_runs(lengths: Sequence[int], model: str = "gpt2-random") -> ResultTable:
    """:func:`published_loop_runs` on the paper's random-GPT-2 real-data inputs (layer 6, Alice, eval mode, the
    script's threshold and cap) at ``lengths``; ``model`` another initialisation (``"gpt2-random:1"``); cached."""
    grid = check_lengths(lengths, minimum=2)
    models.maps.check_model_name(model)
    if model.partition(":")[0] != "gpt2-random":
        raise ValueError(f"model must be a random GPT-2 (gpt2-random or gpt2-random:SEED); got {model!r}")
    s = REAL_DATA_RANDOM_GPT2

    def compute() -> dict[str, list]:
        gpt2, tokenizer = models.load_shared(model)
        ids = data.token_sequences(data.dataset_text("alice"), tokenizer, grid, s.per_length)
        threshold, max_iter = SCRIPT_SETTINGS[s.script]
        inputs = {n: training_inputs(gpt2, s.layer, ids[n]) for n in progress(grid, desc="published loop")}
        runs = published_loop_runs(random_gpt2_attention(gpt2, s.layer), inputs, threshold=threshold,
                                   max_iter=max_iter)
        return runs.to_dict("list")

    return cached_table("random_gpt2_loop_runs", {"lengths": grid, "model": model}, compute)


def dropout_runs(model: nn.Module, layer: int, ids: Mapping[int, Tensor], *, threshold: float, max_iter: int,
                 seed: int = 0) -> pd.DataFrame:
    """App. E.1 as the random-GPT-2 real-data scripts ran it, with dropout left on: a training-mode copy of the
    GPT-2 ``model`` produces the inputs of ``layer``'s attention from ``ids`` (``{n: (B, n)}``) and the published
    loop measures that module in training mode (a fresh dropout mask at every call, the global RNG seeded by
    ``seed`` and restored); ``model`` itself stays in eval mode. One row per input: the loop's value
    (``train_value``) and steps, the eval-mode value of the same loop on the same inputs (``eval_value``,
    ``√‖Jᵀ f(X)‖``) and the smallest token norm."""
    max_iter = check_positive_int(max_iter, "max_iter")
    if model.training:
        raise ValueError("dropout_runs: model must be in eval mode (its training-mode copy is made here)")
    train = copy.deepcopy(model).train()
    train_map, eval_map = random_gpt2_attention(train, layer), random_gpt2_attention(model, layer)
    rows = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(check_positive_int(seed, "seed", 0))
        for n, batch in ids.items():
            X = training_inputs(train, layer, batch)
            run = published_run(train_map, X, threshold=float(threshold), max_iter=max_iter)
            rows.append(pd.DataFrame({
                "n": n, "sequence": range(len(X)), "train_value": run.value.double().numpy(),
                "steps": run.steps.numpy(), "eval_value": published_closed_form(eval_map, X).double().numpy(),
                "min_norm": X.double().norm(dim=-1).amin(1).numpy()}))
    return pd.concat(rows, ignore_index=True)


def decoder_tuple_panel(model_name: str, layer: int, head: int, R: float, lengths: Sequence[int]) -> ResultTable:
    """The BERT-decoder adversarial panel as published (App. C.5): Lemma C.7's input built from ``published_A`` of
    ``head`` at radius ``R``, measured by the published loop on the context output alone (``context``) and on the
    whole output tuple the toolbox differentiated (``tuple``, :func:`~lipnb.paper.decoder_output_tuple_map`);
    one input per length; cached."""
    models.maps.check_model_name(model_name)
    grid = check_lengths(lengths, minimum=2)
    params = {"model": model_name, "layer": check_positive_int(layer, "layer", 0),
              "head": check_positive_int(head, "head", 0), "R": float(R), "lengths": grid}

    def compute() -> dict[str, list]:
        decoder = models.load_shared(model_name)[0]
        sa = models.layer_module(decoder, layer).attention.self
        X = lemma_c_7_input(published_A(decoder, layer, head).double(), float(R), max(grid)).float()
        tuple_map = decoder_output_tuple_map(decoder, layer)

        def context(Y: Tensor) -> Tensor:
            return sa(Y)[0]

        return {"n": grid,
                "context": torch.cat([published_estimator(context, X[:, :n]) for n in grid]).double().tolist(),
                "tuple": torch.cat([published_estimator(tuple_map, X[:, :n]) for n in grid]).double().tolist()}

    return cached_table("decoder_tuple_panel", params, compute)


def layer_map_variants(model_name: str, layer: int, variants: Sequence[tuple[models.MapKind, bool | None]],
                 lengths: Sequence[int], per_length: int, dataset: str = "alice") -> pd.DataFrame:
    """One layer measured as several maps on the same windows of ``dataset``: the rows of
    :func:`~lipnb.experiments.real_text.real_text_sweep` for each ``(kind, masked)`` of ``variants``."""
    pairs = check_sequence(variants, "variants")
    return pd.concat([real_text_sweep(model_name, dataset, lengths, per_length, layers=[layer], kind=kind,
                                      masked=masked).frame for kind, masked in pairs], ignore_index=True)


def _self_module(model: nn.Module, layer: int, implementation: str) -> nn.Module:
    """A copy of ``layer``'s self-attention module (``BertSelfAttention``, ``GPT2Attention``) run by
    ``implementation``."""
    block = models.layer_module(model, layer)
    module = copy.deepcopy(block.attention.self if models.family(model) == "bert" else block.attn)
    module.config = copy.deepcopy(module.config)
    module.config._attn_implementation = implementation
    return module


def module_mask_distances(model: nn.Module, layer: int, X: Tensor, unmasked: Map, masked: Map) -> pd.DataFrame:
    """What ``layer``'s self-attention module does when called with no mask: under each implementation (``eager``,
    ``sdpa``), the largest distance of its output at ``X`` to the closed forms ``masked`` and ``unmasked``."""
    rows = []
    with torch.no_grad():
        for implementation in ("eager", "sdpa"):
            out = _self_module(model, layer, implementation)(X)[0]
            rows.append({"implementation": implementation,
                         "to masked": float((out - masked(X)).abs().max()),
                         "to unmasked": float((out - unmasked(X)).abs().max())})
    return pd.DataFrame(rows)
