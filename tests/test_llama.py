"""The Llama-style decoder: head matrices against the module's scores, the map against the model's own forward."""

from __future__ import annotations

import pytest
import torch

from lipnb import llama


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return llama.random_llama(0)


def test_head_A_gives_the_scores_at_relative_position_zero(model: torch.nn.Module) -> None:
    attn = model.layers[1].self_attn
    X = torch.randn(1, 5, 256, generator=torch.Generator().manual_seed(0))
    q = attn.q_proj(X).view(1, 5, 8, 32)
    k = attn.k_proj(X).view(1, 5, 2, 32)
    for h in (0, 5):
        scores = q[0, :, h] @ k[0, :, h // 4].T * attn.scaling
        A = llama.head_A(model, 1, h)
        torch.testing.assert_close(X[0] @ A.T @ X[0].T, scores, rtol=1e-5, atol=1e-5)


def test_attention_map_is_what_the_model_computes(model: torch.nn.Module) -> None:
    ids = torch.randint(0, 50257, (2, 9), generator=torch.Generator().manual_seed(1))
    outputs: dict[str, torch.Tensor] = {}
    handle = model.layers[2].self_attn.register_forward_hook(lambda m, a, out: outputs.setdefault("y", out[0]))
    try:
        X = llama.attention_inputs(model, [2], ids)[2]
    finally:
        handle.remove()
    torch.testing.assert_close(llama.attention_map(model, 2)(X), outputs["y"], rtol=1e-5, atol=1e-5)
    unrotated = llama.attention_map(model, 2, rotary=False)(X)
    assert (unrotated - outputs["y"]).abs().max() > 1e-4
    Y = X.clone()
    Y[:, -1] += 1
    torch.testing.assert_close(llama.attention_map(model, 2)(Y)[:, :-1], outputs["y"][:, :-1], rtol=1e-5, atol=1e-5)


def test_bad_arguments(model: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match="layer"):
        llama.attention_map(model, 4)
    with pytest.raises(ValueError, match="head"):
        llama.head_A(model, 0, 8)
    with pytest.raises(TypeError, match="LlamaModel"):
        llama.head_A(torch.nn.Linear(2, 2), 0, 0)
