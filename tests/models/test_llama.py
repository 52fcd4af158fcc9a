"""Llama-style maps: closed forms against the Hugging Face modules, torch.func and dense float64 Jacobians; the
per-offset head matrices against the module's rotated scores."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_flops_counted
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from lipnb import models
from lipnb.core import inputs
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix
from lipnb.core.lipschitz import local_lipschitz
from lipnb.models import llama


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return llama.random_llama(0).double()


def _tokens(n: int, seed: int = 0, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, n, 256, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_head_A_gives_the_scores_at_relative_position_zero(model: torch.nn.Module) -> None:
    attn = model.layers[1].self_attn
    X = _tokens(5, batch=1)
    q = attn.q_proj(X).view(1, 5, 8, 32)
    k = attn.k_proj(X).view(1, 5, 2, 32)
    for h in (0, 5):
        scores = q[0, :, h] @ k[0, :, h // 4].T * attn.scaling
        torch.testing.assert_close(X[0] @ llama.head_A(model, 1, h).T @ X[0].T, scores, rtol=1e-12, atol=1e-12)


def test_offset_matrices_give_the_rotated_scores_pair_by_pair(model: torch.nn.Module) -> None:
    """<A_h(i-j) x_i, x_j> is the score the module computes from its own rotated queries and keys."""
    n, attn = 6, model.layers[2].self_attn
    X = _tokens(n, seed=3, batch=1)
    cos, sin = model.rotary_emb(X, torch.arange(n)[None])
    q = attn.q_proj(X).view(1, n, 8, 32).transpose(1, 2)
    k = attn.k_proj(X).view(1, n, 2, 32).transpose(1, 2).repeat_interleave(4, 1)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    scores = (q @ k.mT)[0] * attn.scaling                       # (H, n, n), float32 angles
    A = llama.offset_matrices(model, 2, range(n))                 # (n, H, d, d)
    for i in range(n):
        for j in range(i + 1):
            ours = torch.einsum("hde,e,d->h", A[i - j], X[0, i], X[0, j])
            torch.testing.assert_close(ours, scores[:, i, j], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(A[0], torch.stack([llama.head_A(model, 2, h) for h in range(8)]), rtol=0, atol=0)


@pytest.mark.parametrize("layer", [0, 3])
def test_mha_and_block_are_what_the_model_computes(model: torch.nn.Module, layer: int) -> None:
    X = _tokens(9, seed=layer)
    reference = llama.module_map(model, layer)(X)
    # transformers rounds the rotary angles to float32: agreement to that precision, not to float64's.
    torch.testing.assert_close(llama.attention_map(model, layer)(X), reference, rtol=1e-6, atol=1e-6)
    block = model.layers[layer]
    torch.testing.assert_close(llama.attention_map(model, layer, "block")(X),
                               X + llama.module_map(model, layer)(block.input_layernorm(X)), rtol=1e-6, atol=1e-6)
    assert (llama.attention_map(model, layer, rotary=False)(X) - reference).abs().max() > 1e-3


def test_inputs_are_what_the_modules_receive(model: torch.nn.Module) -> None:
    ids = torch.randint(0, 50257, (2, 9), generator=torch.Generator().manual_seed(1))
    seen: dict[str, torch.Tensor] = {}
    handle = model.layers[2].self_attn.register_forward_hook(lambda m, a, out: seen.setdefault("y", out[0]))
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        handle.remove()
    X = models.attention_inputs(model, 2, ids)
    torch.testing.assert_close(llama.attention_map(model, 2)(X), seen["y"], rtol=1e-6, atol=1e-6)
    H = models.attention_inputs(model, 2, ids, "block")
    torch.testing.assert_close(model.layers[2].input_layernorm(H), X, rtol=1e-6, atol=1e-6)


def test_a_single_head_is_its_slice_of_the_layer(model: torch.nn.Module) -> None:
    X = _tokens(7, seed=4)
    heads = torch.cat([llama.attention_map(model, 1, head=h)(X) for h in range(8)], dim=-1)
    Wo = model.layers[1].self_attn.o_proj.weight
    torch.testing.assert_close(heads @ Wo.T, llama.attention_map(model, 1)(X), rtol=1e-12, atol=1e-12)


def test_causal(model: torch.nn.Module) -> None:
    X = _tokens(8, seed=5)
    Y = X.clone()
    Y[:, -1] += 1
    f = llama.attention_map(model, 2)
    torch.testing.assert_close(f(Y)[:, :-1], f(X)[:, :-1], rtol=0, atol=0)


@pytest.mark.parametrize(("kind", "head", "rotary"), [("mha", None, True), ("mha", 6, True), ("block", None, True),
                                                      ("mha", None, False)])
def test_closed_form_products_match_torch_func(model: torch.nn.Module, kind: str, head: int | None,
                                               rotary: bool) -> None:
    f = llama.attention_map(model, 1, kind, head=head, rotary=rotary)
    X = _tokens(11, seed=6)
    lin = f.linearize(X)
    E, G = torch.randn_like(X), torch.randn_like(lin.output)
    torch.testing.assert_close(lin.output, f(X), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(lin.jvp(E), torch.func.jvp(f, (X,), (E,))[1], rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(lin.vjp(G), torch.func.vjp(f, X)[1](G)[0], rtol=1e-11, atol=1e-11)
    sub = lin.select(torch.tensor([1]))
    torch.testing.assert_close(sub.jvp(E[1:]), lin.jvp(E)[1:], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(lin.to(torch.float32).jvp(E.float()), lin.jvp(E).float(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["mha", "block"])
def test_dense_jacobian_and_local_constant(model: torch.nn.Module, kind: str) -> None:
    f = llama.attention_map(model, 3, kind)
    X = _tokens(4, seed=7, batch=1)
    lin = f.linearize(X)
    basis = torch.eye(4 * 256, dtype=torch.float64).view(-1, 1, 4, 256)
    closed = torch.stack([lin.jvp(e)[0].flatten() for e in basis], dim=1)
    torch.testing.assert_close(closed, jacobian_matrix(lambda Z: f(Z), X)[0], rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(local_lipschitz(f, X, tol=1e-10), exact_local_lipschitz(lambda Z: f(Z), X),
                               rtol=1e-8, atol=0)


def test_offset_spectra_equal_those_of_the_full_matrices(model: torch.nn.Module) -> None:
    offsets = [0, 3, 17]
    small = llama.offset_spectra(model, 1, offsets)
    full = inputs.head_spectra(llama.offset_matrices(model, 1, offsets).flatten(0, 1))
    for name in ("largest", "smallest", "gamma"):
        torch.testing.assert_close(getattr(small, name), getattr(full, name).view(3, 8), rtol=1e-9, atol=1e-12)
    assert torch.equal(small.positive, full.positive.view(3, 8))


def test_aligned_input_gives_the_unrotated_head(model: torch.nn.Module) -> None:
    """A head with rotary positions on the aligned input computes what it computes on Y without them."""
    Y = _tokens(10, seed=8)
    for h in (0, 7):
        X = llama.aligned_input(model, 2, h, Y)
        torch.testing.assert_close(llama.attention_map(model, 2, head=h)(X),
                                   llama.attention_map(model, 2, head=h, rotary=False)(Y), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(X[:, 0], Y[:, 0], rtol=1e-12, atol=1e-12)
        assert (X[:, 1:] - Y[:, 1:]).abs().max() > 1e-2


def test_models_routes_llama_to_these_maps(model: torch.nn.Module) -> None:
    ids = torch.randint(0, 50257, (1, 6), generator=torch.Generator().manual_seed(2))
    for kind in ("mha", "block"):
        X = models.attention_inputs(model, 1, ids, kind)
        f = models.attention_map(model, 1, kind)
        assert isinstance(f, llama.RotaryAttentionMap if kind == "mha" else llama.RotaryBlockMap)
        torch.testing.assert_close(f(X), llama.attention_map(model, 1, kind)(X), rtol=0, atol=0)


def test_bad_arguments(model: torch.nn.Module) -> None:
    with pytest.raises(ValueError, match="layer"):
        llama.attention_map(model, 4)
    with pytest.raises(ValueError, match="kind"):
        llama.attention_map(model, 0, "attention")
    with pytest.raises(ValueError, match="head"):
        llama.attention_map(model, 0, head=8)
    with pytest.raises(ValueError, match="head"):
        llama.attention_map(model, 0, "block", head=0)
    with pytest.raises(ValueError, match="head"):
        llama.head_A(model, 0, 8)
    with pytest.raises(TypeError, match="LlamaModel"):
        llama.head_A(torch.nn.Linear(2, 2), 0, 0)
    with pytest.raises(ValueError, match="d = 3"):
        llama.attention_map(model, 0).linearize(torch.zeros(1, 2, 3, dtype=torch.float64))


def test_rotary_flop_formula_counts_every_matrix_product(model: torch.nn.Module) -> None:
    """``RotaryAttentionMap.flops(n)`` equals torch's count of the matrix products its closed form runs."""
    X = torch.randn(1, 7, model.config.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert_flops_counted(llama.attention_map(model, 1), X)
