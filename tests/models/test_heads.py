"""The head helpers of :mod:`lipnb.models.heads` (Lemma 3.8, App. E.3): LayerNorm activations of real architectures,
bias perturbations (Remark E.1), the textbook multi-head layer, single heads and per-head constants."""

from __future__ import annotations

import pytest
import torch
from conftest import random_multihead
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

from lipnb import MultiHead, exact_local_lipschitz, local_lipschitz, models, multihead_attention
from lipnb.core.attention import single_head
from lipnb.core.jacobian import MultiHeadMap
from lipnb.core.normalization import normalization_radius
from lipnb.models.heads import (
    attention_layernorm,
    bias_perturbation_effect,
    layernorm_activations,
    per_head_lipschitz,
    textbook_multihead,
)

F64 = torch.float64


# --------------------------------------------------------------------------- real-architecture helpers


@pytest.fixture(scope="module")
def tiny_bert() -> BertModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=32, attn_implementation="eager")
        model = BertModel(config).double().eval().requires_grad_(False)
        for name, p in model.named_parameters():  # non-trivial LayerNorm parameters and biases
            if "bias" in name or "LayerNorm.weight" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def tiny_gpt2() -> GPT2Model:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32, attn_implementation="eager")
        model = GPT2Model(config).double().eval().requires_grad_(False)
        for name, p in model.named_parameters():
            if "bias" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_layernorm_activations_feed_attention(family: str, tiny_bert: BertModel, tiny_gpt2: GPT2Model) -> None:
    model = tiny_bert if family == "bert" else tiny_gpt2
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    acts = layernorm_activations(model, [0, 1], ids)
    inputs = models.attention_inputs(model, [0, 1], ids)
    for layer in (0, 1):
        x, y = acts[layer]
        ln = attention_layernorm(model, layer)
        assert torch.equal(y, inputs[layer])
        assert torch.allclose(y, torch.nn.functional.layer_norm(x, (16,), ln.weight, ln.bias, ln.eps), atol=1e-13)
        R, _ = normalization_radius(ln.weight, ln.bias)
        assert bool((y.norm(dim=-1) <= R).all())
    with pytest.raises(ValueError):
        attention_layernorm(tiny_bert, 2)


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_bias_perturbation_effect(family: str, tiny_bert: BertModel, tiny_gpt2: GPT2Model) -> None:
    """Remark E.1 on the modules: the key bias does not change the output, the query and value biases do."""
    model = tiny_bert if family == "bert" else tiny_gpt2
    X = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(1), dtype=F64)
    before = [p.clone() for p in model.parameters()]
    assert bias_perturbation_effect(model, 1, X, "key") < 1e-12
    assert bias_perturbation_effect(model, 1, X, "query") > 1e-4
    assert bias_perturbation_effect(model, 1, X, "value") > 1e-4
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # model untouched
    with pytest.raises(ValueError):
        bias_perturbation_effect(model, 1, X, "output")


def test_textbook_multihead_drops_the_key_bias(gen: torch.Generator) -> None:
    H, k, d = 2, 3, 5
    Q, K, V = torch.randn(3, H, k, d, generator=gen, dtype=F64)
    W = torch.randn(H, d, k, generator=gen, dtype=F64)
    b_Q, b_K, b_V = torch.randn(3, H, k, generator=gen, dtype=F64)
    X = torch.randn(2, 4, d, generator=gen, dtype=F64)
    heads = MultiHead.from_projections(Q, K, V, W, q_bias=b_Q, v_bias=b_V)
    expected = multihead_attention(X, heads)
    for key_bias in (b_K, 10 * b_K, torch.zeros_like(b_K)):
        assert torch.allclose(textbook_multihead(X, Q, K, V, W, b_Q, key_bias, b_V), expected, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- heads (Lemma 3.8)


def test_single_head_and_per_head_lipschitz(gen: torch.Generator) -> None:
    heads = random_multihead(gen)
    X = torch.randn(3, 5, 8, generator=gen, dtype=F64)
    out = sum(multihead_attention(X, single_head(heads, h, project=True)) for h in range(heads.num_heads))
    assert torch.allclose(out + heads.output_bias, multihead_attention(X, heads), atol=1e-12)
    for project in (False, True):
        values, converged = per_head_lipschitz(heads, X, project=project, tol=1e-10)
        assert values.shape == (3, 3) and bool(converged.all())
        exact = torch.stack([exact_local_lipschitz(MultiHeadMap(single_head(heads, h, project=project)), X)
                             for h in range(heads.num_heads)])
        assert torch.allclose(values, exact, rtol=1e-6)
    # Lemma 3.8 at each input
    L_h, _ = per_head_lipschitz(heads, X)
    total = local_lipschitz(MultiHeadMap(heads), X)
    assert bool((total <= (torch.linalg.matrix_norm(heads.W, ord=2)[:, None] * L_h).sum(0)).all())
