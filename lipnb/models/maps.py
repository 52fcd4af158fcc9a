"""Real attention layers (Sec. 5) as maps on sequences: BERT-architecture encoders and decoders, GPT-2 and
Llama-style decoders, the closed set of map kinds (:data:`MapKind`) and the one place that decides what each
kind means in each family (:func:`attention_map`, :func:`attention_inputs`, :func:`head_matrices`).

Models come from :mod:`lipnb.models.loading`; Llama-family maps are :mod:`lipnb.models.llama`'s closed forms.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, get_args

import torch
from torch import Tensor, nn
from transformers import BertModel, GPT2Model, LlamaModel

from ..arguments import check_bool, check_index, check_input_dtype, check_sequence, check_token_ids, check_tokens
from ..core.attention import MultiHead, causal_mask, single_head
from ..core.jacobian import MultiHeadMap, concat_heads
from ..core.linearization import Linearization
from ..core.sublayers import ResidualAttentionMap
from .llama import attention_map as llama_map
from .llama import head_A as llama_head_A
from .loading import check_model_name

__all__ = [
    "KINDS",
    "MODULE_KINDS",
    "UNMASKED_TWIN",
    "Family",
    "LayerMap",
    "MapKind",
    "attention_inputs",
    "attention_map",
    "capture_inputs",
    "check_kind",
    "check_model_name",
    "family",
    "forward_with_hooks",
    "head_A",
    "head_matrices",
    "is_decoder",
    "layer_module",
    "num_layers",
]

MapKind = Literal["mha", "self", "block", "head"]
KINDS: tuple[MapKind, ...] = get_args(MapKind)
MODULE_KINDS: tuple[MapKind, ...] = ("self", "block")  # run the Hugging Face module: the model's own masking
Family = Literal["bert", "gpt2", "llama"]
UNMASKED_TWIN = {"minilm-decoder": "minilm", "bert-base-uncased-decoder": "bert-base-uncased"}


def family(model: nn.Module) -> Family:
    """``"bert"``, ``"gpt2"`` or ``"llama"``; ``TypeError`` for any other module."""
    if isinstance(model, BertModel):
        return "bert"
    if isinstance(model, GPT2Model):
        return "gpt2"
    if isinstance(model, LlamaModel):
        return "llama"
    raise TypeError("expected a BertModel, GPT2Model or LlamaModel (see lipnb.models.load); "
                    f"got {type(model).__name__}")


def is_decoder(model: nn.Module) -> bool:
    """Whether the model's self-attention is causal (Def 2.5): GPT-2 and Llama always, BERT when ``is_decoder``."""
    return family(model) != "bert" or bool(model.config.is_decoder)


def num_layers(model: nn.Module) -> int:
    """Number of transformer layers."""
    family(model)
    return model.config.num_hidden_layers


def layer_module(model: nn.Module, layer: int) -> nn.Module:
    """The ``layer``-th transformer layer (``BertLayer``, ``GPT2Block`` or ``LlamaDecoderLayer``), range-checked."""
    fam = family(model)
    layers = model.encoder.layer if fam == "bert" else model.h if fam == "gpt2" else model.layers
    return layers[check_index(layer, "layer", len(layers))]


def check_kind(kind: object) -> MapKind:
    """``kind`` if it is one of :data:`KINDS`, else ``ValueError`` naming the valid kinds."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return kind  # type: ignore[return-value]


def _check_map_arguments(model: nn.Module, layer: int, kind: object, head: int | None,
                        masked: bool | None) -> tuple[int, MapKind, int | None, bool | None]:
    """``(layer, kind, head, masked)`` of :func:`attention_map`, checked for every family alike: ``layer`` and
    ``head`` ints in range, ``head`` given only for ``kind="head"`` (default 0, ``None`` for the others: a whole
    layer has no head), ``masked`` ``None`` or a bool that the map can honour (the modules of ``"self"`` and
    ``"block"`` mask as the model does; a Llama model is always causal)."""
    kind = check_kind(kind)
    layer_module(model, layer)
    if kind != "head" and head is not None:
        raise ValueError(f"head is only for kind='head'; kind={kind!r} is the whole layer (got head={head!r})")
    if kind == "head":
        head = check_index(0 if head is None else head, "head", model.config.num_attention_heads)
    if masked is not None:
        masked = check_bool(masked, "masked")
        if kind in MODULE_KINDS and masked != is_decoder(model):
            raise ValueError(f"masked={masked} but kind={kind!r} runs the module as the model does "
                             f"(masked={is_decoder(model)}); for the other masking load the twin model "
                             "(UNMASKED_TWIN) or use kind='mha'/'head'")
        if family(model) == "llama" and not masked:
            raise ValueError("masked=False: a Llama model is causal (see lipnb.models.llama)")
    return int(layer), kind, head, masked


def _multihead(
    q: Tensor, q_bias: Tensor, k: Tensor, v: Tensor, v_bias: Tensor, o: Tensor, o_bias: Tensor,
    num_heads: int, scaling: float,
) -> MultiHead:
    """Def 2.2 from fused projections in ``nn.Linear`` layout ``(out, in)``; head h owns rows h*k:(h+1)*k.

    The module's scores are ``scaling * <q_i, k_j>``; ``from_projections`` divides by sqrt(k), so the
    query side is rescaled by ``scaling * sqrt(k)`` (1 for the usual ``scaling = k**-0.5``).
    """
    d_in, d_out = q.shape[1], o.shape[0]
    Q, K, V = (w.reshape(num_heads, -1, d_in) for w in (q, k, v))
    head_dim = Q.shape[1]
    rescale = scaling * math.sqrt(head_dim)
    W = o.reshape(d_out, num_heads, head_dim).permute(1, 0, 2)
    return MultiHead.from_projections(
        Q * rescale, K, V, W,
        q_bias=q_bias.reshape(num_heads, head_dim) * rescale,
        v_bias=v_bias.reshape(num_heads, head_dim),
        o_bias=o_bias,
    )


def head_matrices(model: nn.Module, layer: int) -> MultiHead:
    """Def 2.2's ``(A_h, V_h, W_h)`` and App. E.3's biases of a layer's self-attention (no grad).

    BERT: ``nn.Linear`` query/key/value ``(out, in)`` and output ``attention.output.dense``. GPT-2:
    ``Conv1D`` stores ``(in, out)``; ``c_attn`` packs Q, K, V side by side and ``c_proj`` is the output.
    ``W_h`` is the output projection's columns ``h*k:(h+1)*k``.
    """
    if family(model) == "llama":
        raise TypeError("head_matrices reads BERT and GPT-2 layers; for a Llama model see lipnb.models.llama")
    block = layer_module(model, layer)
    with torch.no_grad():
        if family(model) == "bert":
            sa, out = block.attention.self, block.attention.output.dense
            return _multihead(sa.query.weight, sa.query.bias, sa.key.weight, sa.value.weight,
                              sa.value.bias, out.weight, out.bias, sa.num_attention_heads, sa.scaling)
        attn = block.attn
        q, k, v = attn.c_attn.weight.T.split(attn.split_size, dim=0)
        q_bias, _, v_bias = attn.c_attn.bias.split(attn.split_size)
        return _multihead(q, q_bias, k, v, v_bias, attn.c_proj.weight.T, attn.c_proj.bias,
                          attn.num_heads, attn.scaling)


def head_A(model: nn.Module, layer: int, head: int) -> Tensor:
    """Def 2.1's ``A_h`` of head ``head`` of layer ``layer``, for every family (Llama: at relative position 0)."""
    layer_module(model, layer)
    head = check_index(head, "head", model.config.num_attention_heads)
    if family(model) == "llama":
        return llama_head_A(model, layer, head)
    return head_matrices(model, layer).A[head]


def _check_eval(model: nn.Module) -> None:
    """``ValueError`` if the model is in training mode: its dropout would make every call random."""
    if model.training:
        raise ValueError("the model is in training mode (dropout active); call model.eval()")


def _check_input(X: Tensor, model: nn.Module) -> None:
    """``ValueError`` unless ``X`` is ``(B, n, d_model)`` in the model's dtype and device, model in eval."""
    _check_eval(model)
    check_tokens(X)
    p = next(model.parameters())
    check_input_dtype(X, p.dtype)
    if X.dtype != p.dtype or X.device != p.device:
        raise ValueError(f"X is {X.dtype} on {X.device} but the model is {p.dtype} on {p.device}; "
                         "cast one to match (e.g. model.double() or X.to(p))")
    if X.shape[-1] != model.config.hidden_size:
        raise ValueError(f"X has tokens of d = {X.shape[-1]} but the model has hidden size {model.config.hidden_size}")


def _self_map(model: nn.Module, layer: int) -> Callable[[Tensor], Tensor]:
    """The HF self-attention module itself, with an explicit causal mask for decoders."""
    block = layer_module(model, layer)
    module = block.attention.self if family(model) == "bert" else block.attn
    decoder = is_decoder(model)
    return lambda X: module(X, attention_mask=causal_mask(X) if decoder else None)[0]


def _block_map(model: nn.Module, layer: int) -> Callable[[Tensor], Tensor]:
    """The attention sub-layer as the model runs it (BERT post-LN, GPT-2 pre-LN), residual included."""
    block = layer_module(model, layer)
    decoder = is_decoder(model)
    if family(model) == "bert":
        return lambda X: block.attention(X, attention_mask=causal_mask(X) if decoder else None)[0]
    return lambda X: X + block.attn(block.ln_1(X), attention_mask=causal_mask(X))[0]


_MAPS = {"self": _self_map, "block": _block_map}


def _closed_form(model: nn.Module, layer: int, kind: MapKind, head: int,
                 masked: bool) -> MultiHeadMap | ResidualAttentionMap:
    """``attention_map(model, layer, kind, head=head, masked=masked)`` from the weights, with closed-form products."""
    heads = head_matrices(model, layer)
    if kind == "head":
        return MultiHeadMap(single_head(heads, head), masked=masked)
    if kind == "mha" or (kind == "self" and family(model) == "gpt2"):
        return MultiHeadMap(heads, masked=masked)
    if kind == "self":
        return MultiHeadMap(concat_heads(heads), masked=masked)   # BertSelfAttention: heads side by side
    block = layer_module(model, layer)
    norm = block.attention.output.LayerNorm if family(model) == "bert" else block.ln_1
    return ResidualAttentionMap(MultiHeadMap(heads, masked=masked), norm.weight.detach(), norm.bias.detach(),
                                norm.eps, post=family(model) == "bert")


class LayerMap:
    """What :func:`attention_map` returns: a map ``(B, n, d) -> (B, n, d')`` that knows its Jacobian.

    Calling it runs the Hugging Face module (``"self"``, ``"block"``) or Def 2.2 (``"mha"``, ``"head"``), under
    autograd and ``torch.func`` alike. :meth:`linearize` gives the closed-form products of
    :meth:`closed_form` (Lemma C.2, composed with the residual and LayerNorm for ``"block"``), which
    :func:`lipnb.local_lipschitz` uses; ``lambda X: f(X)`` hides them and forces autograd. The closed
    form is rebuilt whenever the layer's weights change, move or change dtype.
    """

    def __init__(self, model: nn.Module, layer: int, kind: MapKind, *, head: int | None = None,
                 masked: bool | None = None) -> None:
        if family(model) == "llama":
            raise TypeError("LayerMap reads BERT and GPT-2 layers; for a Llama model use attention_map")
        layer, kind, head, masked = _check_map_arguments(model, layer, kind, head, masked)
        self.model, self.layer, self.kind, self.head = model, layer, kind, head
        self.masked = is_decoder(model) if masked is None else masked
        self.params = list(layer_module(model, layer).parameters())
        self._module = _MAPS[kind](model, layer) if kind in MODULE_KINDS else None
        self._key: tuple | None = None
        self._map: MultiHeadMap | ResidualAttentionMap | None = None

    def closed_form(self) -> MultiHeadMap | ResidualAttentionMap:
        """The layer as a :class:`~lipnb.core.jacobian.MultiHeadMap` (``"head"``, ``"mha"``, ``"self"``) or a
        :class:`~lipnb.core.sublayers.ResidualAttentionMap` (``"block"``) of its current weights."""
        key = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in self.params)
        if key != self._key or self._map is None:
            self._key, self._map = key, _closed_form(self.model, self.layer, self.kind, self.head, self.masked)
        return self._map

    def __call__(self, X: Tensor) -> Tensor:
        _check_input(X, self.model)
        return self.closed_form()(X) if self._module is None else self._module(X)

    def linearize(self, X: Tensor) -> Linearization:
        """Closed-form ``jvp`` and ``vjp`` at the batch ``X`` (see :func:`lipnb.core.linearization.linearize`)."""
        _check_input(X, self.model)
        return self.closed_form().linearize(X)

    def float64_map(self) -> MultiHeadMap | ResidualAttentionMap:
        """The map :func:`lipnb.local_lipschitz` evaluates in float64 to certify a float32 run: the closed form,
        whose parameters cast to float64 exactly (the module itself refuses float64 inputs)."""
        return self.closed_form()

    def flops(self, n: int) -> dict[str, int]:
        """Matrix-product FLOPs of the closed form per input of ``n`` tokens (``MultiHeadMap.flops``)."""
        return self.closed_form().flops(n)


def attention_map(model: nn.Module, layer: int, kind: MapKind = "mha", *, head: int | None = None,
                  masked: bool | None = None) -> LayerMap | Callable[[Tensor], Tensor]:
    """Layer ``layer``'s attention as a map ``(B, n, d) -> (B, n, d')``, causal for decoders (Def 2.5).

    The one place that decides what each :data:`MapKind` means in each :data:`Family`.
    Arguments are checked alike for every family (:func:`_check_map_arguments`).
    ``"head"``: head ``head`` alone, Def 2.1 with its score and value biases and value map ``V_h``, before the
    output projection (``d' = k``; :func:`lipnb.core.attention.single_head` with ``project=False``).
    ``"mha"``: Def 2.2 with App. E.3's biases, ``sum_h W_h f_h(X) + b_O`` from :func:`head_matrices`;
    no residual, no LayerNorm: the map the theorems bound. ``masked`` overrides the model's causality for
    these two (``None``: the model's own).
    ``"self"``: the HF self-attention module. BERT: ``BertSelfAttention``, the heads' outputs
    concatenated, before the output projection (d' = H k). GPT-2: ``GPT2Attention``, with ``c_proj``
    (so it equals ``"mha"``).
    ``"block"``: the attention sub-layer. BERT: ``BertAttention``, ``LayerNorm(X + dense(self(X)))``.
    GPT-2: ``X + attn(ln_1(X))``.
    Every kind is a :class:`LayerMap` with closed-form Jacobian products, so
    :func:`lipnb.local_lipschitz` needs no autograd. ``X`` must be in the model's dtype and device;
    the map follows later ``model.double()``/``.to``. Inputs: :func:`attention_inputs` with the same ``kind``.
    Llama (:mod:`lipnb.models.llama`, rotary positions ``0..n-1`` unless the model was loaded as
    ``"llama-random-norope"``, always causal): ``"mha"``/``"self"`` (the attention module), ``"block"``
    (``X + mha(RMSNorm X)``), ``"head"`` (head ``head`` alone); closed forms there.
    """
    layer, kind, head, masked = _check_map_arguments(model, layer, kind, head, masked)
    if family(model) == "llama":
        rotary = getattr(model.config, "rotary", True)
        if kind == "head":
            return llama_map(model, layer, "mha", head=head, rotary=rotary)
        return llama_map(model, layer, kind, rotary=rotary)
    return LayerMap(model, layer, kind, head=head, masked=masked)


class _StopForward(Exception):
    """Raised by the last capture hook: later layers need not run."""


def _input_module(model: nn.Module, layer: int, kind: str) -> nn.Module:
    """The module whose first input is the input of ``attention_map(model, layer, kind)``."""
    block = layer_module(model, layer)
    if family(model) == "bert":
        return block.attention if kind == "block" else block.attention.self
    return block if kind == "block" else block.self_attn if family(model) == "llama" else block.attn


def attention_inputs(
    model: nn.Module, layer: int | Sequence[int], input_ids: Tensor, kind: str = "mha"
) -> Tensor | dict[int, Tensor]:
    """The ``(B, n, d)`` tensors entering ``attention_map(model, layer, kind)`` in a forward of ``input_ids``.

    BERT, every kind: the hidden state entering layer ``layer`` (the input of ``BertAttention`` and of
    ``BertSelfAttention``). GPT-2, ``"mha"``/``"self"``: ``ln_1`` of the hidden state entering block
    ``layer`` (what ``GPT2Attention`` receives); ``"block"``: the hidden state entering the block.
    Captured by forward pre-hooks in one ``torch.no_grad`` forward, stopped after the last layer asked
    for; a sequence of layers gives ``{layer: tensor}``. ``input_ids`` are checked against the model's vocabulary and
    positions before the forward. Llama, ``"mha"``/``"self"``/``"head"``: what
    ``LlamaAttention`` receives (after ``input_layernorm``); ``"block"``: the hidden state entering the layer.
    """
    check_kind(kind)
    _check_eval(model)
    single = isinstance(layer, str | bytes) or not isinstance(layer, Iterable)
    given = [layer] if single else check_sequence(layer, "layer")
    layers = [check_index(i, "layer", num_layers(model)) for i in given]
    check_token_ids(input_ids, model.config.vocab_size, model.config.max_position_embeddings)
    captured = capture_inputs(model, input_ids, {i: _input_module(model, i, kind) for i in set(layers)})
    return captured[layers[0]] if single else {i: captured[i] for i in layers}


def capture_inputs(model: nn.Module, input_ids: Tensor, modules: dict[int, nn.Module]) -> dict[int, Tensor]:
    """The first input of each of ``modules`` (keyed by layer) in one forward of ``input_ids``, stopped once the
    module of the largest key has received its input."""
    captured: dict[int, Tensor] = {}
    last = max(modules)

    def capture(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            captured[index] = (args[0] if args else kwargs["hidden_states"]).clone()
            if index == last:
                raise _StopForward

        return hook

    handles = [m.register_forward_pre_hook(capture(i), with_kwargs=True) for i, m in modules.items()]
    forward_with_hooks(model, input_ids, handles)
    return captured


def forward_with_hooks(model: nn.Module, input_ids: Tensor, handles: list) -> None:
    """One ``no_grad`` forward of ``model`` on ``input_ids`` (moved to its device) for capturing hooks, which are
    removed afterwards; a hook may end the pass early by raising :class:`_StopForward`."""
    try:
        with torch.no_grad():
            model(input_ids=input_ids.to(next(model.parameters()).device), use_cache=False)
    except _StopForward:
        pass
    finally:
        for handle in handles:
            handle.remove()
