"""Real models offline: loading, Def 2.2's head matrices, the three attention maps, causality, inputs."""

from __future__ import annotations

import copy
import socket
import time
from collections.abc import Callable, Iterator

import pytest
import torch
from huggingface_hub import constants as hub_constants
from torch import Tensor, nn
from transformers import GPT2Model

from lipnb import models
from lipnb.core.attention import multihead_attention
from lipnb.core.linearization import Linearizable
from lipnb.core.lipschitz import local_lipschitz
from lipnb.models import loading

OFFLINE = models.OFFLINE_MODELS
SENTENCE = "Alice was beginning to get very tired of sitting by her sister"


def _refuse(self: socket.socket, *args: object) -> None:
    raise OSError("network disabled in tests")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may open a connection: every connect fails at once."""
    monkeypatch.setattr(socket.socket, "connect", _refuse)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny tensors: one intra-op thread is faster, and immune to OpenMP spinning on a busy CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple]]:
    """The three offline models, loaded once with the network off and a private cache folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _refuse)
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
        yield {name: models.load(name) for name in OFFLINE}


@pytest.fixture(scope="module")
def double(loaded: dict[str, tuple]) -> dict[str, nn.Module]:
    """float64 copies of the offline models."""
    return {name: copy.deepcopy(model).double() for name, (model, _) in loaded.items()}


def _ids(loaded: dict[str, tuple], name: str, batch: int = 2, n: int = 7) -> Tensor:
    tokenizer = loaded[name][1]
    ids = tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    return torch.tensor([ids[i:i + n] for i in range(batch)])


class _Seen(Exception):
    """Every recorded module has run: the rest of the forward is not needed."""


def _record(model: nn.Module, input_ids: Tensor, modules: list[nn.Module]) -> list[Tensor]:
    """The first input each module receives during a plain forward of the model."""
    seen: dict[int, Tensor] = {}

    def keeper(i: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            seen.setdefault(i, (args[0] if args else kwargs["hidden_states"]).clone())
            if len(seen) == len(modules):
                raise _Seen

        return hook

    hooks = [m.register_forward_pre_hook(keeper(i), with_kwargs=True) for i, m in enumerate(modules)]
    try:
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)
    except _Seen:
        pass
    finally:
        for h in hooks:
            h.remove()
    return [seen[i] for i in range(len(modules))]


def _io(model: nn.Module, layer: int, input_ids: Tensor) -> dict[str, Tensor]:
    """What a plain forward feeds each stage of layer ``layer`` and what each stage hands on."""
    if isinstance(model, GPT2Model):
        b = model.h[layer]
        names = {"block_in": b, "attn_in": b.attn, "mha_out": b.attn.resid_dropout, "block_out": b.ln_2}
    else:
        b = model.encoder.layer[layer]
        names = {"block_in": b.attention, "attn_in": b.attention.self, "self_out": b.attention.output,
                 "mha_out": b.attention.output.dropout, "block_out": b.intermediate}
    return dict(zip(names, _record(model, input_ids, list(names.values())), strict=True))


# -- loading ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OFFLINE)
def test_offline_models_load_from_installed_packages(loaded: dict[str, tuple], name: str) -> None:
    model, tokenizer = loaded[name]
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert model.config._attn_implementation == "eager"
    assert models.is_decoder(model) == (name != "minilm")
    assert len(tokenizer(SENTENCE)["input_ids"]) > 5


def test_gpt2_tokenizer_is_gpt2s(loaded: dict[str, tuple]) -> None:
    assert loaded["gpt2-random"][1]("Alice was", add_special_tokens=False)["input_ids"] == [44484, 373]


@pytest.mark.slow
def test_random_gpt2_is_seeded_and_leaves_the_rng_alone(loaded: dict[str, tuple]) -> None:
    state = torch.get_rng_state()
    again, _ = models.load("gpt2-random")
    assert torch.equal(torch.get_rng_state(), state)
    first = loaded["gpt2-random"][0].state_dict()
    assert all(torch.equal(first[k], v) for k, v in again.state_dict().items())


def test_unknown_model_lists_the_names() -> None:
    with pytest.raises(ValueError, match="minilm, minilm-decoder, gpt2-random, bert-base-uncased"):
        models.load("bert")


@pytest.mark.parametrize("name", list(models.HUB_MODELS))
@pytest.mark.parametrize("env_offline", [False, True])
def test_hub_model_offline_fails_fast(name: str, env_offline: bool, monkeypatch: pytest.MonkeyPatch,
                                      tmp_path: object) -> None:
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))  # nothing cached
    if env_offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    message = f"{name} needs the Hugging Face hub \\(internet\\); offline use '{models.HUB_MODELS[name]}'"
    with pytest.raises(models.OfflineError, match=message):
        models.load(name)
    assert time.perf_counter() - start < 5


def test_the_decoder_model_is_causal(loaded: dict[str, tuple]) -> None:
    """In the installed transformers, is_decoder=True really masks BERT; the encoder does not."""
    ids = _ids(loaded, "minilm")
    moved = ids.clone()
    moved[:, -1] = 2000
    for name, causal in (("minilm-decoder", True), ("minilm", False)):
        model = loaded[name][0]
        with torch.no_grad():
            a, b = model(ids).last_hidden_state, model(moved).last_hidden_state
        assert torch.equal(a[:, :-1], b[:, :-1]) == causal, name


# -- head matrices and the three maps, against the models' own forward (float64) -------------


@pytest.mark.parametrize("name", OFFLINE)
def test_head_matrices_rebuild_the_modules(loaded: dict[str, tuple], double: dict[str, nn.Module],
                                           name: str) -> None:
    model = double[name]
    for layer in (0, 2):
        io = _io(model, layer, _ids(loaded, name))
        heads = models.head_matrices(model, layer)
        assert heads.num_heads == 12 and heads.A.dtype == torch.float64
        rebuilt = multihead_attention(io["attn_in"], heads, masked=models.is_decoder(model))
        torch.testing.assert_close(rebuilt, io["mha_out"], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", OFFLINE)
def test_maps_equal_the_models_own_computation(loaded: dict[str, tuple], double: dict[str, nn.Module],
                                               name: str) -> None:
    model, layer = double[name], 1
    ids = _ids(loaded, name)
    io = _io(model, layer, ids)
    expected = {"mha": io["mha_out"], "self": io.get("self_out", io["mha_out"]), "block": io["block_out"]}
    for kind in expected:  # "head": test_head_and_mha_maps_match_the_module
        X = models.attention_inputs(model, layer, ids, kind=kind)
        torch.testing.assert_close(X, io["block_in" if kind == "block" else "attn_in"], rtol=0, atol=0)
        torch.testing.assert_close(models.attention_map(model, layer, kind)(X), expected[kind],
                                   rtol=1e-10, atol=1e-10)


def _set_biases(model: nn.Module, layer: int, biases: str, gen: torch.Generator) -> None:
    """Layer ``layer``'s biases (LayerNorm's β included) as trained, drawn at random (and LayerNorm's γ
    too, so that every term of the products matters), or zero."""
    with torch.no_grad():
        for name, p in models.layer_module(model, layer).named_parameters():
            if biases == "random":
                if name.endswith("bias") or "ln" in name.lower() or "LayerNorm" in name:
                    p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)
            elif biases == "zero" and name.endswith("bias"):
                p.zero_()


@pytest.mark.slow
@pytest.mark.parametrize("biases", ["trained", "random", "zero"])
@pytest.mark.parametrize("name", OFFLINE)
def test_every_map_has_closed_form_products(loaded: dict[str, tuple], double: dict[str, nn.Module],
                                            name: str, biases: str) -> None:
    """Every kind of ``attention_map`` is :class:`Linearizable`: its closed-form output equals the Hugging
    Face module and its ``J E`` and ``Jᵀ G`` equal ``torch.func`` on the module (float64), for the encoder
    and both causal decoders, with biases as trained, random or zero; and they follow a change of the weights.
    GPT-2's pre-LN block is ``E + ...``: its attention part alone is compared, so that it cannot hide."""
    model, layer = copy.deepcopy(double[name]), 1
    gen = torch.Generator().manual_seed(3)
    _set_biases(model, layer, biases, gen)
    ids = _ids(loaded, name)
    for kind in models.KINDS:
        f = models.attention_map(model, layer, kind)
        assert isinstance(f, Linearizable)
        X = models.attention_inputs(model, layer, ids, kind=kind)
        E = torch.randn(X.shape, generator=gen, dtype=torch.float64)
        skip = kind == "block" and name == "gpt2-random"
        for _ in range(2):
            lin = f.linearize(X)
            Y, JE = torch.func.jvp(f, (X,), (E,))
            G = torch.randn(Y.shape, generator=gen, dtype=torch.float64)
            JtG = torch.func.vjp(f, X)[1](G)[0]
            for a, b, identity in ((lin.output, Y, X), (lin.jvp(E), JE, E), (lin.vjp(G), JtG, G)):
                if skip:
                    a, b = a - identity, b - identity
                torch.testing.assert_close(a, b, rtol=0, atol=1e-11 * float(b.abs().max()))
            with torch.no_grad():
                next(models.layer_module(model, layer).parameters()).mul_(1.5)


@pytest.mark.slow
@pytest.mark.parametrize("name", OFFLINE)
def test_closed_form_and_autograd_give_the_same_constants(loaded: dict[str, tuple], double: dict[str, nn.Module],
                                                          name: str) -> None:
    """``local_lipschitz`` through the closed form and through autograd on the module (``lambda X: f(X)``
    hides ``linearize``) agree for every kind, in float64."""
    model = double[name]
    for kind in models.KINDS:
        f = models.attention_map(model, 2, kind)
        X = models.attention_inputs(model, 2, _ids(loaded, name, batch=3), kind=kind)
        fast = local_lipschitz(f, X, tol=1e-10)
        torch.testing.assert_close(fast, local_lipschitz(lambda Z, f=f: f(Z), X, tol=1e-10), rtol=1e-8, atol=0)


@pytest.mark.parametrize("name", OFFLINE)
@pytest.mark.parametrize("kind", models.KINDS)
def test_decoder_maps_are_causal(loaded: dict[str, tuple], name: str, kind: str) -> None:
    model = loaded[name][0]
    f = models.attention_map(model, 0, kind)
    X = models.attention_inputs(model, 0, _ids(loaded, name), kind=kind)
    moved = X.clone()
    moved[:, -1] += 1.0
    Y, Z = f(X), f(moved)
    assert not torch.equal(Y[:, -1], Z[:, -1])
    assert torch.equal(Y[:, 0], Z[:, 0]) == models.is_decoder(model)
    if models.is_decoder(model):
        assert torch.equal(Y[:, :-1], Z[:, :-1])


# -- inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["minilm-decoder", "gpt2-random"])
def test_attention_inputs_match_a_manual_forward(loaded: dict[str, tuple], name: str) -> None:
    model = loaded[name][0]
    ids = _ids(loaded, name, batch=3)
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True, use_cache=False).hidden_states
    blocks = models.attention_inputs(model, [2, 0], ids, kind="block")
    attn = models.attention_inputs(model, (0, 2), ids)
    assert list(blocks) == [2, 0] and list(attn) == [0, 2]
    for layer in (0, 2):
        torch.testing.assert_close(blocks[layer], hidden[layer], rtol=0, atol=0)
        if name == "gpt2-random":
            torch.testing.assert_close(attn[layer], model.h[layer].ln_1(hidden[layer]), rtol=0, atol=0)
        else:
            torch.testing.assert_close(attn[layer], hidden[layer], rtol=0, atol=0)
    torch.testing.assert_close(models.attention_inputs(model, 2, ids, kind="self"), attn[2], rtol=0, atol=0)


# -- autodiff, batch, dtype -------------------------------------------------------------------


@pytest.mark.parametrize("kind", models.KINDS)
def test_maps_work_under_jvp_vjp_and_autograd(loaded: dict[str, tuple], double: dict[str, nn.Module],
                                              kind: str) -> None:
    model = double["minilm-decoder"]
    f = models.attention_map(model, 0, kind)
    X = models.attention_inputs(model, 0, _ids(loaded, "minilm-decoder", batch=1, n=5), kind=kind)
    gen = torch.Generator().manual_seed(0)
    V = torch.randn(X.shape, generator=gen, dtype=X.dtype)
    Y, Jv = torch.func.jvp(f, (X,), (V,))
    U = torch.randn(Y.shape, generator=gen, dtype=X.dtype)
    (JtU,) = torch.func.vjp(f, X)[1](U)
    eps = 1e-6
    torch.testing.assert_close(Jv, (f(X + eps * V) - f(X - eps * V)) / (2 * eps), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close((U * Jv).sum(), (JtU * V).sum(), rtol=1e-10, atol=1e-10)
    # plain autograd, and the double-backward route to J v
    X_ = X.clone().requires_grad_()
    u = torch.zeros_like(Y, requires_grad=True)
    (g,) = torch.autograd.grad(f(X_), X_, u, create_graph=True)
    (Jv2,) = torch.autograd.grad(g, u, V)
    torch.testing.assert_close(Jv2, Jv, rtol=1e-10, atol=1e-10)


def test_map_follows_the_models_dtype_and_any_batch(loaded: dict[str, tuple]) -> None:
    model = copy.deepcopy(loaded["minilm"][0])
    ids = _ids(loaded, "minilm", batch=3)
    X = models.attention_inputs(model, 0, ids)
    maps: dict[str, Callable[[Tensor], Tensor]] = {k: models.attention_map(model, 0, k) for k in models.KINDS}
    single = maps["mha"](X[1:2])
    torch.testing.assert_close(maps["mha"](X)[1:2], single, rtol=1e-5, atol=1e-5)
    model.double()
    for f in maps.values():
        assert f(X.double()).dtype == torch.float64
        with pytest.raises(ValueError, match=r"float32.*float64"):
            f(X)
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        maps["self"](X.double())
    with pytest.raises(ValueError, match="training mode"):
        models.attention_inputs(model, 0, ids)


def test_bad_arguments(loaded: dict[str, tuple]) -> None:
    model = loaded["minilm"][0]
    ids = _ids(loaded, "minilm")
    with pytest.raises(ValueError, match="unknown kind 'attn'; valid kinds: mha, self, block, head"):
        models.attention_map(model, 0, "attn")
    with pytest.raises(ValueError, match="unknown kind"):
        models.attention_inputs(model, 0, ids, kind="attn")
    with pytest.raises(ValueError, match=r"layer must be in 0\.\.5; got 6"):
        models.head_matrices(model, 6)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, n\)"):
        models.attention_inputs(model, 0, ids[0])
    with pytest.raises(ValueError, match="hidden size 384"):
        models.attention_map(model, 0)(torch.zeros(1, 3, 5))
    with pytest.raises(TypeError, match="BertModel, GPT2Model or LlamaModel"):
        models.head_matrices(nn.Linear(2, 2), 0)


# -- device -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_load_puts_the_model_on_the_default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load`` follows ``lipnb.profiles.default_device()`` (the GPU when there is one) unless told."""
    monkeypatch.setattr(loading, "default_device", lambda: torch.device("meta"))
    model, _ = models.load("gpt2-random")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    model, _ = models.load("gpt2-random", device="cpu")
    assert {p.device.type for p in model.parameters()} == {"cpu"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", models.KINDS)
def test_maps_and_inputs_follow_a_gpu_model(loaded: dict[str, tuple], kind: str) -> None:
    """On CUDA, inputs and maps follow the model, and the closed form gives the CPU's constants."""
    model = copy.deepcopy(loaded["minilm-decoder"][0])
    ids = _ids(loaded, "minilm-decoder")
    X = models.attention_inputs(model, 1, ids, kind=kind)
    on_cpu = local_lipschitz(models.attention_map(model, 1, kind), X)
    model.cuda()
    Xg = models.attention_inputs(model, 1, ids, kind=kind)
    assert Xg.device.type == "cuda"
    on_gpu = local_lipschitz(models.attention_map(model, 1, kind), Xg)
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-4, atol=0)


# -- one place per family -----------------------------------------------------------------------


def test_head_and_mha_maps_match_the_module(loaded: dict[str, tuple]) -> None:
    """``"mha"`` (masked) is the HF module's output projection of the heads; ``"head"`` is one of its heads."""
    decoder = loaded["minilm-decoder"][0]
    X = torch.randn(2, 7, 384, generator=torch.Generator().manual_seed(0))
    sa = decoder.encoder.layer[2].attention.self
    mask = torch.full((7, 7), torch.finfo(X.dtype).min).triu(1)[None, None]
    context = sa(X, attention_mask=mask)[0]
    dense = decoder.encoder.layer[2].attention.output.dense
    torch.testing.assert_close(models.attention_map(decoder, 2, "mha")(X), dense(context), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(models.attention_map(decoder, 2, "head", head=3)(X), context[..., 96:128],
                               rtol=1e-4, atol=1e-4)
    unmasked = sa(X)[0]
    torch.testing.assert_close(models.attention_map(decoder, 2, "head", head=3, masked=False)(X),
                               unmasked[..., 96:128], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(models.head_A(decoder, 2, 3), models.head_matrices(decoder, 2).A[3])


def test_attention_map_rejects_bad_arguments(loaded: dict[str, tuple]) -> None:
    decoder = loaded["minilm-decoder"][0]
    with pytest.raises(ValueError, match="kind"):
        models.attention_map(decoder, 0, "nope")
    with pytest.raises(ValueError, match="twin"):
        models.attention_map(decoder, 0, "self", masked=False)
    with pytest.raises(ValueError, match="head"):
        models.attention_map(decoder, 0, "head", head=12)
    with pytest.raises(ValueError, match="head"):
        models.head_A(decoder, 0, 12)


def test_llama_family_is_dispatched_to_lipnb_llama() -> None:
    """A Llama model: every kind of map and its inputs come from :mod:`lipnb.models.llama` (rotary unless
    ``-norope``)."""
    from lipnb.models import llama

    model, tokenizer = models.load("llama-random")
    ids = tokenizer("Alice was beginning to get very tired", return_tensors="pt")["input_ids"]
    assert models.family(model) == "llama" and models.is_decoder(model) and models.num_layers(model) == 4
    X = models.attention_inputs(model, 1, ids)
    torch.testing.assert_close(X, model.layers[1].input_layernorm(models.attention_inputs(model, 1, ids, "block")))
    torch.testing.assert_close(models.attention_map(model, 1)(X), llama.attention_map(model, 1)(X))
    norope = models.load("llama-random-norope")[0]
    torch.testing.assert_close(models.attention_map(norope, 1)(X), llama.attention_map(model, 1, rotary=False)(X))
    torch.testing.assert_close(models.head_A(model, 1, 2), llama.head_A(model, 1, 2))
    Xb = models.attention_inputs(model, 1, ids, "block")
    torch.testing.assert_close(models.attention_map(model, 1, "block")(Xb), llama.attention_map(model, 1, "block")(Xb))
    torch.testing.assert_close(models.attention_map(model, 1, "head", head=2)(X),
                               llama.attention_map(model, 1, head=2)(X))
    with pytest.raises(ValueError, match="causal"):
        models.attention_map(model, 1, masked=False)
    with pytest.raises(TypeError, match=r"lipnb\.models\.llama"):
        models.head_matrices(model, 1)


@pytest.mark.slow
def test_random_gpt2_seeds() -> None:
    """``"gpt2-random:SEED"`` is GPT-2 small from another seed; seed 0 is ``"gpt2-random"``."""
    zero, other = models.load("gpt2-random")[0], models.load("gpt2-random:1")[0]
    assert torch.equal(models.load("gpt2-random:0")[0].h[0].attn.c_attn.weight, zero.h[0].attn.c_attn.weight)
    assert not torch.equal(other.h[0].attn.c_attn.weight, zero.h[0].attn.c_attn.weight)
    with pytest.raises(ValueError, match="gpt2-random:SEED"):
        models.load("gpt2-random:x")


def test_minilm_trained_length_is_read_from_its_model_card() -> None:
    """The fine-tuning length chapter 22 starts its long windows from: the card says 128 tokens, and the
    checkpoint's position table is longer, which is why windows past it can be run at all."""
    trained = loading.minilm_trained_length()
    model, _ = models.load("minilm", device="cpu")
    assert trained == 128 and model.config.max_position_embeddings > trained
