"""Beyond the paper: a small randomly initialised Llama-style decoder (RMSNorm, rotary positions, grouped-query heads).

``random_llama`` builds it offline from a ``transformers`` config (with GPT-2's tokenizer for text);
``attention_map`` is a layer's self-attention as a map of the tokens entering it (after RMSNorm), causal,
with rotary positions (``rotary=True``, as the model runs) or with the rotation switched off, so that
Proposition 3.4's construction can be measured both ways; ``head_A`` is Def 2.1's ``A_h`` of a head at
relative position zero (where rotary positions leave the scores unchanged). ``growth_sweep`` measures local
constants of a pretrained Llama decoder (``lipnb.models.load("smollm2")``) on windows of a text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import pandas as pd
import torch
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaModel

from . import data
from .lipschitz import local_lipschitz
from .models import forward_with_hooks
from .results import ResultTable, cached_table, progress

__all__ = ["CONFIG", "attention_inputs", "attention_map", "growth_sweep", "head_A", "is_llama", "random_llama"]

CONFIG = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8,
          "num_key_value_heads": 2, "vocab_size": 50257, "max_position_embeddings": 1024}


def is_llama(model: nn.Module) -> bool:
    """Whether ``model`` is a ``LlamaModel``."""
    return isinstance(model, LlamaModel)


def random_llama(seed: int = 0) -> LlamaModel:
    """A Llama-style decoder of :data:`CONFIG` with the random weights of ``torch.manual_seed(seed)``, eval, frozen."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaModel(LlamaConfig(**CONFIG, attn_implementation="eager"))
    return model.eval().requires_grad_(False)


def _check(model: nn.Module, layer: int) -> nn.Module:
    if not is_llama(model):
        raise TypeError(f"expected a LlamaModel; got {type(model).__name__}")
    if not 0 <= layer < model.config.num_hidden_layers:
        raise ValueError(f"layer must be in 0..{model.config.num_hidden_layers - 1}; got {layer}")
    return model.layers[layer].self_attn


def attention_map(model: nn.Module, layer: int, *, rotary: bool = True) -> Callable[[Tensor], Tensor]:
    """Def 2.2 as the model runs it (grouped-query heads and output projection), causal (Def 2.5), ``(B, n, d)``."""
    attn = _check(model, layer)

    def f(X: Tensor) -> Tensor:
        n = X.shape[1]
        positions = torch.arange(n, device=X.device)[None].expand(X.shape[0], -1)
        cos, sin = model.rotary_emb(X, positions)
        if not rotary:
            cos, sin = torch.ones_like(cos), torch.zeros_like(sin)
        mask = torch.full((n, n), torch.finfo(X.dtype).min, dtype=X.dtype, device=X.device).triu(1)[None, None]
        return attn(hidden_states=X, position_embeddings=(cos, sin), attention_mask=mask)[0]

    return f


def attention_inputs(model: nn.Module, layers: Sequence[int], input_ids: Tensor) -> dict[int, Tensor]:
    """The tokens entering each layer's self-attention (after ``input_layernorm``) in a no-grad forward."""
    captured: dict[int, Tensor] = {}

    def capture(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            captured[index] = (args[0] if args else kwargs["hidden_states"]).clone()

        return hook

    handles = [_check(model, i).register_forward_pre_hook(capture(i), with_kwargs=True) for i in set(layers)]
    forward_with_hooks(model, input_ids, handles)
    return {i: captured[i] for i in layers}


def head_A(model: nn.Module, layer: int, head: int) -> Tensor:
    """Def 2.1: ``A_h = K_gᵀ Q_h · scaling`` of head ``h`` and its key-value group ``g`` (no rotation)."""
    attn = _check(model, layer)
    H, k = model.config.num_attention_heads, attn.head_dim
    if not 0 <= head < H:
        raise ValueError(f"head must be in 0..{H - 1}; got {head}")
    group = head // attn.num_key_value_groups
    Q = attn.q_proj.weight.detach()[head * k:(head + 1) * k]
    K = attn.k_proj.weight.detach()[group * k:(group + 1) * k]
    return K.T @ Q * attn.scaling


def growth_sweep(model: nn.Module, tokenizer: object, name: str, text: str, layers: Sequence[int],
                 lengths: Sequence[int], per_length: int) -> ResultTable:
    """Sec. 5.1 for a Llama decoder: ``Lip_X`` of :func:`attention_map` (rotary, causal) at every window of
    :func:`lipnb.data.token_sequences` of ``text``, at each layer, in the model's dtype; cached under ``name``
    (which must identify the model and its dtype). Columns: ``layer, n, sequence, lip, radius`` (root mean
    square token norm)."""
    lengths, layers = [int(n) for n in lengths], [int(i) for i in layers]
    params = {"model": name, "dtype": str(next(model.parameters()).dtype),
              "text": hashlib.sha256(text.encode()).hexdigest()[:16], "layers": layers, "lengths": lengths,
              "per_length": per_length}

    def compute() -> dict[str, list]:
        sequences = data.token_sequences(text, tokenizer, lengths, per_length)
        rows = []
        for n in progress(lengths, desc=f"{name} growth"):
            inputs = attention_inputs(model, layers, sequences[n])
            for i in layers:
                X = inputs[i]
                rows.append(pd.DataFrame({
                    "layer": i, "n": n, "sequence": range(len(X)),
                    "lip": local_lipschitz(attention_map(model, i), X).cpu().numpy(),
                    "radius": X.double().norm(dim=-1).square().mean(1).sqrt().cpu().numpy()}))
        return pd.concat(rows, ignore_index=True).to_dict("list")

    return cached_table("llama_growth", params, compute)
