"""Helpers of chapters 2 (normalization, Sec. 2.3) and 8 (multi-head and biases, Lemma 3.8, App. E.3)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

from lipnb import MultiHead, exact_local_lipschitz, local_lipschitz, models, multihead_attention
from lipnb.attention import MultiHeadMap
from lipnb.heads import (
    attention_layernorm,
    bias_perturbation_effect,
    layernorm_activations,
    per_head_lipschitz,
    single_head,
    textbook_multihead,
)
from lipnb.inputs import maximize_local_lipschitz
from lipnb.normalization import (
    absorb_normalization,
    layer_norm,
    normalization_radius,
    normalization_radius_bound,
    normalize_tokens,
    rms_norm,
)

F64 = torch.float64


def _circle(d: int, center: bool, points: int = 200_001) -> torch.Tensor:
    """Dense samples of ``{|z| = sqrt(d)}`` (``d = 2``) or ``{|z| = sqrt(d), sum z = 0}`` (``d = 3``)."""
    theta = torch.linspace(0, 2 * math.pi, points, dtype=F64)
    if center:
        e1 = torch.tensor([1.0, -1.0, 0.0], dtype=F64) / math.sqrt(2)
        e2 = torch.tensor([1.0, 1.0, -2.0], dtype=F64) / math.sqrt(6)
    else:
        e1, e2 = torch.eye(2, dtype=F64)
    return math.sqrt(d) * (theta.cos()[:, None] * e1 + theta.sin()[:, None] * e2)


# --------------------------------------------------------------------------- normalization


def test_norms_match_torch(gen: torch.Generator) -> None:
    d = 12
    x = 3 * torch.randn(50, d, generator=gen, dtype=F64) + 1
    g, b = torch.rand(d, generator=gen, dtype=F64) + 0.1, torch.randn(d, generator=gen, dtype=F64)
    assert torch.allclose(layer_norm(x, g, b, 1e-5), torch.nn.functional.layer_norm(x, (d,), g, b, 1e-5),
                          atol=1e-13, rtol=0)
    assert torch.allclose(rms_norm(x, g, 1e-6), torch.nn.functional.rms_norm(x, (d,), g, 1e-6), atol=1e-13, rtol=0)


def test_normalized_tokens_lie_on_the_sphere(gen: torch.Generator) -> None:
    """Sec. 2.3: ``sum z = 0`` and ``|z|² = d σ²/(σ² + eps)`` (LayerNorm), ``|z|² = d μ₂/(μ₂ + eps)`` (RMSNorm)."""
    d, eps = 20, 1e-2
    x = torch.randn(2, 7, d, generator=gen, dtype=F64)
    z = normalize_tokens(x, center=True, eps=eps)
    var = x.var(-1, unbiased=False)
    assert z.sum(-1).abs().max() < 1e-12
    assert torch.allclose(z.square().sum(-1), d * var / (var + eps), rtol=1e-13, atol=0)
    r = normalize_tokens(x, center=False, eps=eps)
    ms = x.square().mean(-1)
    assert torch.allclose(r.square().sum(-1), d * ms / (ms + eps), rtol=1e-13, atol=0)
    assert torch.allclose(normalize_tokens(x, center=False).norm(dim=-1), torch.full_like(ms, math.sqrt(d)))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("center", [True, False])
def test_normalization_radius_matches_a_scan(seed: int, center: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    d = 3 if center else 2
    g = torch.rand(d, generator=gen, dtype=F64) + 0.1
    b = torch.randn(d, generator=gen, dtype=F64)
    R, z = normalization_radius(g, b, center=center)
    scan = (b + g * _circle(d, center)).norm(dim=1).max()
    assert abs(R - scan) < 1e-8 and scan <= R + 1e-12
    assert abs(z.norm() - math.sqrt(d)) < 1e-12
    if center:
        assert abs(z.sum()) < 1e-12
    assert abs((b + g * z).norm() - R) < 1e-12
    assert R <= normalization_radius_bound(g, b) + 1e-12


def test_normalization_radius_without_shift(gen: torch.Generator) -> None:
    """β = 0 is the hard case of the secular equation: ``R = sqrt(d) ||diag(γ) P||`` (RMSNorm: ``sqrt(d) max|γ|``)."""
    d = 10
    g = torch.rand(d, generator=gen, dtype=F64) + 0.1
    P = torch.eye(d, dtype=F64) - 1.0 / d
    R, z = normalization_radius(g)
    assert abs(R - math.sqrt(d) * torch.linalg.matrix_norm(g[:, None] * P, ord=2)) < 1e-12
    assert abs(z.sum()) < 1e-12 and abs(z.norm() - math.sqrt(d)) < 1e-12
    R_rms, _ = normalization_radius(g, center=False)
    assert abs(R_rms - normalization_radius_bound(g)) < 1e-12


def test_normalization_radius_contains_all_outputs(gen: torch.Generator) -> None:
    d = 64
    g, b = torch.rand(d, generator=gen, dtype=F64), 0.3 * torch.randn(d, generator=gen, dtype=F64)
    R, z = normalization_radius(g, b)
    outputs = layer_norm(torch.randn(5000, d, generator=gen, dtype=F64), g, b, eps=1e-5)
    assert bool((outputs.norm(dim=1) <= R).all())
    # the maximizer is a local maximum on the constraint set, and LayerNorm attains it
    for _ in range(20):
        nearby = normalize_tokens((z + 0.01 * torch.randn(d, generator=gen, dtype=F64))[None])[0]
        assert (b + g * nearby).norm() <= R + 1e-12
    assert abs(layer_norm(z[None], g, b, eps=0.0)[0].norm() - R) < 1e-12


def _random_heads(gen: torch.Generator, d: int = 8, H: int = 3, k: int = 2, biases: bool = True) -> MultiHead:
    Q, K, V = torch.randn(3, H, k, d, generator=gen, dtype=F64)
    W = torch.randn(H, d, k, generator=gen, dtype=F64)
    if not biases:
        return MultiHead.from_projections(Q, K, V, W)
    b_Q, b_V = torch.randn(2, H, k, generator=gen, dtype=F64)
    o_bias = torch.randn(d, generator=gen, dtype=F64)
    return MultiHead.from_projections(Q, K, V, W, q_bias=b_Q, v_bias=b_V, o_bias=o_bias)


@pytest.mark.parametrize("biases", [True, False])
def test_absorb_normalization(gen: torch.Generator, biases: bool) -> None:
    """Sec. 2.3: attention after RMSNorm / LayerNorm = absorbed attention on the normalized tokens."""
    d = 8
    heads = _random_heads(gen, d=d, biases=biases)
    X = 2 * torch.randn(2, 6, d, generator=gen, dtype=F64) + 0.5
    g, b = torch.rand(d, generator=gen, dtype=F64) + 0.2, torch.randn(d, generator=gen, dtype=F64)
    rms = multihead_attention(rms_norm(X, g, 1e-6), heads)
    rms_absorbed = multihead_attention(normalize_tokens(X, center=False, eps=1e-6), absorb_normalization(heads, g))
    assert ((rms - rms_absorbed).norm() / rms.norm()) < 1e-13
    ln = multihead_attention(layer_norm(X, g, b, 1e-5), heads)
    ln_absorbed = multihead_attention(normalize_tokens(X, eps=1e-5), absorb_normalization(heads, g, b))
    assert ((ln - ln_absorbed).norm() / ln.norm()) < 1e-13


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
    heads = _random_heads(gen)
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


def test_maximize_local_lipschitz(gen: torch.Generator) -> None:
    heads = _random_heads(gen, d=3, H=1, k=3)
    f = MultiHeadMap(heads)
    X0 = 2 * torch.randn(3, 4, 3, generator=gen, dtype=F64)
    R = 1.5
    X, best = maximize_local_lipschitz(f, X0, R, steps=20)
    assert bool((X.norm(dim=-1) <= R + 1e-12).all())
    assert torch.allclose(best, exact_local_lipschitz(f, X), rtol=1e-10)
    start = X0 * (R / X0.norm(dim=-1, keepdim=True)).clamp(max=1)
    assert bool((best >= exact_local_lipschitz(f, start) - 1e-12).all())
