"""The published code's runs re-run (:mod:`lipnb.experiments.code_audit`), each against an independent computation:
closed forms of a linear map, autograd gradients of ``½‖F‖²`` (which is ``Jᵀ F``), attention written out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from scipy.special import betainc
from transformers import GPT2Config, GPT2Model

from lipnb import data, models
from lipnb.core import lemma_c_7_input
from lipnb.experiments.code_audit import (
    ADVERSARIAL_PANEL_SETTINGS,
    adversarial_corrections,
    decoder_tuple_panel,
    dropout_runs,
    estimators_on_real_text,
    layer_map_variants,
    module_mask_distances,
    published_loop_runs,
    random_gpt2_loop_runs,
)
from lipnb.paper.paper_settings import ADVERSARIAL_RANDOM_GPT2, paper_random_gpt2
from lipnb.paper.published import published_A
from lipnb.profiles import PROFILES

F64 = torch.float64


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty results cache."""
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def _half_norm_gradient(fn, X: torch.Tensor) -> torch.Tensor:
    """``Jᵀ F(X)`` for every input, by autograd: the gradient of ``½‖F(X_b)‖²`` (inputs act separately)."""
    X = X.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(0.5 * fn(X).square().sum(), X)
    return grad


def _tiny_gpt2(dropout: float) -> GPT2Model:
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=32, vocab_size=50, attn_pdrop=dropout,
                        resid_pdrop=dropout, embd_pdrop=dropout, bos_token_id=0, eos_token_id=0,
                        attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return GPT2Model(config).eval().requires_grad_(False)


def test_published_loop_runs_on_a_linear_map() -> None:
    """For ``f(X) = X W`` token by token, ``Jᵀ f(X) = X W Wᵀ``: the loop returns ``√‖X W Wᵀ‖``, the true constant is
    ``‖W‖₂``, and the first-step probability is the regularised incomplete beta function of the threshold."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(4, 4, generator=g, dtype=F64)
    inputs = {n: torch.randn(3, n, 4, generator=g, dtype=F64) for n in (3, 5)}

    def fn(X: torch.Tensor) -> torch.Tensor:
        return X @ W

    runs = published_loop_runs(fn, inputs, threshold=1e-12, max_iter=50)
    w = torch.cat([(X @ W @ W.T).flatten(1).norm(dim=1) for X in inputs.values()])
    assert list(runs.n) == [3] * 3 + [5] * 3 and list(runs.sequence) == [0, 1, 2] * 2
    torch.testing.assert_close(torch.tensor(runs.published.to_numpy()), w.sqrt(), rtol=1e-12, atol=0)
    torch.testing.assert_close(torch.tensor(runs.run.to_numpy()), w.sqrt(), rtol=1e-10, atol=0)
    norm_W = torch.linalg.matrix_norm(W, ord=2)
    torch.testing.assert_close(torch.tensor(runs.lanczos.to_numpy()), norm_W.expand(6), rtol=1e-4, atol=0)
    sizes = torch.tensor([3 * 4] * 3 + [5 * 4] * 3, dtype=F64)
    expected = betainc(0.5, (sizes.numpy() - 1) / 2, (1e-12 / w.numpy()) ** 2)
    assert runs.p_stop.to_numpy() == pytest.approx(expected, rel=1e-9)
    assert not runs.stopped.any() and not runs.nan.any()
    norms = torch.cat([X.norm(dim=-1).amin(1) for X in inputs.values()])
    assert runs.min_norm.to_numpy() == pytest.approx(norms.numpy())
    every = published_loop_runs(fn, inputs, threshold=1e9, max_iter=50)
    assert every.stopped.all() and every.p_stop.to_numpy() == pytest.approx(1.0)


def test_random_gpt2_loop_runs_refuses_other_models_before_any_work() -> None:
    with pytest.raises(ValueError, match="random GPT-2"):
        random_gpt2_loop_runs([4], model="minilm")
    with pytest.raises(ValueError, match="lengths"):
        random_gpt2_loop_runs([])


@pytest.mark.slow
def test_dropout_runs_equal_the_eval_loop_without_dropout_and_differ_with_it() -> None:
    """With every dropout probability 0 the training-mode loop returns the eval-mode value ``√‖Jᵀ f‖`` (computed here
    by autograd); with dropout it does not."""
    ids = {6: torch.randint(50, (3, 6), generator=torch.Generator().manual_seed(1))}
    quiet = _tiny_gpt2(0.0)
    runs = dropout_runs(quiet, 0, ids, threshold=1e-9, max_iter=1000)
    attn = quiet.h[0].attn
    X = models.maps.capture_inputs(quiet, ids[6], {0: attn})[0]
    mask = torch.ones(6, 6, dtype=torch.bool).tril()

    def causal(Y: torch.Tensor) -> torch.Tensor:
        return attn(Y, attention_mask=torch.where(mask, 0.0, -torch.inf))[0]

    by_autograd = _half_norm_gradient(causal, X).flatten(1).norm(dim=1).sqrt().double()
    torch.testing.assert_close(torch.tensor(runs.eval_value.to_numpy()), by_autograd, rtol=1e-5, atol=0)
    torch.testing.assert_close(torch.tensor(runs.train_value.to_numpy()), by_autograd, rtol=1e-4, atol=0)
    assert not quiet.training
    noisy = dropout_runs(_tiny_gpt2(0.5), 0, ids, threshold=1e-9, max_iter=1000)
    assert (noisy.train_value / noisy.eval_value - 1).abs().max() > 1e-3
    with pytest.raises(ValueError, match="eval mode"):
        dropout_runs(_tiny_gpt2(0.0).train(), 0, ids, threshold=1e-3, max_iter=10)


def test_module_mask_distances_against_attention_written_out() -> None:
    """A GPT-2 attention module given no mask: eager attention is the unmasked softmax, ``sdpa`` the causal one (both
    written out here from the module's weights)."""
    model = _tiny_gpt2(0.0)
    attn = model.h[0].attn
    X = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2))

    def by_hand(causal: bool):
        def fn(Y: torch.Tensor) -> torch.Tensor:
            q, k, v = (Y @ attn.c_attn.weight + attn.c_attn.bias).split(16, dim=-1)
            q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k, v))
            scores = q @ k.transpose(-1, -2) / math.sqrt(8)
            if causal:
                scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -torch.inf)
            out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 16)
            return out @ attn.c_proj.weight + attn.c_proj.bias

        return fn

    table = module_mask_distances(model, 0, X, unmasked=by_hand(False), masked=by_hand(True)).set_index(
        "implementation")
    assert table.loc["eager", "to unmasked"] < 1e-5 < 1e-3 < table.loc["eager", "to masked"]
    assert table.loc["sdpa", "to masked"] < 1e-5 < 1e-3 < table.loc["sdpa", "to unmasked"]
    assert model.h[0].attn.config._attn_implementation == "eager"   # the model's own module is left as it was


@pytest.mark.slow
def test_adversarial_corrections_all_three_corrected_is_the_saturated_head(cache: None) -> None:
    """Head 0 alone on its own Lemma C.7 input at ``R = 100`` is saturated: its constant is ``‖V_0‖₂ √n`` at every
    length, with ``V_0`` read here from GPT-2's packed ``Conv1D`` weight (value block, head 0's columns)."""
    s = ADVERSARIAL_RANDOM_GPT2
    panel = adversarial_corrections(["all three corrected"])
    assert list(panel.columns) == ["setting", "n", "lip", "C_n"] and list(panel.n) == list(s.lengths)
    model = paper_random_gpt2(s.seed)
    d = model.config.n_embd
    k = d // model.config.n_head
    value = model.h[s.layer].attn.c_attn.weight[:, 2 * d + s.head * k: 2 * d + (s.head + 1) * k]
    norm_V = float(torch.linalg.matrix_norm(value.double(), ord=2))
    assert panel.C_n.to_numpy() == pytest.approx(norm_V, rel=1e-3)
    assert set(ADVERSARIAL_PANEL_SETTINGS["all three corrected"]) == {"estimator", "matrix", "map"}
    with pytest.raises(ValueError, match="settings"):
        adversarial_corrections(["dropout corrected"])


def test_decoder_tuple_panel_differentiates_the_cache_too(cache: None) -> None:
    """The published loop on the BERT decoder's output tuple returns ``√‖Jᵀ F‖`` for ``F`` = (context, key, value):
    computed here by autograd, and so for the context alone."""
    panel = decoder_tuple_panel("minilm-decoder", 0, 0, 21.5, [2, 5]).frame
    decoder = models.load_shared("minilm-decoder")[0]
    sa = models.layer_module(decoder, 0).attention.self
    X = lemma_c_7_input(published_A(decoder, 0, 0).double(), 21.5, 5).float()

    def whole(Y: torch.Tensor) -> torch.Tensor:
        return torch.cat([sa(Y)[0], sa.key(Y), sa.value(Y)], dim=1)

    for column, fn in (("context", lambda Y: sa(Y)[0]), ("tuple", whole)):
        expected = [float(_half_norm_gradient(fn, X[:, :n]).norm().sqrt()) for n in (2, 5)]
        assert panel[column].to_numpy() == pytest.approx(expected, rel=1e-4)
    assert (panel.tuple > panel.context).all()


@pytest.mark.slow
def test_estimators_and_map_variants_on_alice(alice: None) -> None:
    """Each model's middle layer, on the map its script differentiated, by both estimators; the published value of
    random GPT-2's attention module is ``√‖Jᵀ f‖`` (autograd). One layer as two maps: both measured on one window."""
    p = PROFILES["quick"]
    table = estimators_on_real_text(p, lengths=[4], per_length=1)
    assert len(table) == 6 and set(table.estimator) == {"published", "lanczos"}
    assert set(zip(table.model, table.kind, table.masked, strict=True)) == {
        ("minilm", "block", False), ("minilm-decoder", "block", False), ("gpt2-random", "self", True)}
    gpt2, tokenizer = models.load_shared("gpt2-random")
    ids = data.token_sequences(data.alice_text(), tokenizer, [4], 1)[4]
    X = models.attention_inputs(gpt2, 6, ids, "self")
    expected = float(_half_norm_gradient(models.attention_map(gpt2, 6, "self"), X).norm().sqrt())
    published = table[(table.model == "gpt2-random") & (table.estimator == "published")].lip.item()
    assert published == pytest.approx(expected, rel=1e-4)
    variants = layer_map_variants("minilm", 3, [("head", None), ("mha", None)], [4], 1)
    assert list(variants.kind) == ["head", "mha"] and (variants.lip > 0).all()
