"""Real layers taken apart: per-head constants, single heads, LayerNorms and biases (Sec. 2.3, Lemma 3.8, App. E)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable

import torch

from ..core.attention import MultiHead, single_head
from ..core.jacobian import MultiHeadMap
from ..core.lipschitz import local_lipschitz
from . import maps

__all__ = [
    "attention_layernorm",
    "bias_perturbation_effect",
    "layernorm_activations",
    "per_head_lipschitz",
    "textbook_multihead",
]


def attention_layernorm(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """Sec. 2.3: the LayerNorm whose output enters layer ``layer``'s self-attention.

    BERT (post-LN): the embeddings' LayerNorm for layer 0, else the output LayerNorm of layer ``layer - 1``.
    GPT-2 (pre-LN): the block's ``ln_1``.
    """

    block = maps.layer_module(model, layer)                  # checks the family and the range of ``layer``
    if maps.family(model) == "gpt2":
        return block.ln_1
    return model.embeddings.LayerNorm if layer == 0 else maps.layer_module(model, layer - 1).output.LayerNorm


def layernorm_activations(model: torch.nn.Module, layers: Iterable[int],
                          input_ids: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Sec. 2.3: ``{layer: (x, LayerNorm(x))}`` of each :func:`attention_layernorm`, by forward hooks, no grad."""

    layers = list(layers)
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(index: int) -> Callable[..., None]:
        def capture(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
            captured[index] = (args[0].detach().clone(), output.detach().clone())
        return capture

    handles = [attention_layernorm(model, i).register_forward_hook(hook(i)) for i in layers]
    maps.forward_with_hooks(model, input_ids, handles)
    return {i: captured[i] for i in layers}


def per_head_lipschitz(heads: MultiHead, X: torch.Tensor, *, project: bool = False, masked: bool = False,
                       **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Lemma 3.8: ``Lip_X(f_h)`` (or ``Lip_X(W_h f_h)`` if ``project``) of every head, ``(H, B)``, and convergence.

    Each head keeps its score and value biases (App. E.3), drops the output bias; ``kwargs`` go to
    :func:`lipnb.local_lipschitz`.
    """
    values, converged = [], []
    for h in range(heads.num_heads):
        one = single_head(heads, h, project=project)
        result = local_lipschitz(MultiHeadMap(one, masked=masked), X, detailed=True, **kwargs)
        values.append(result.value)
        converged.append(result.converged)
    return torch.stack(values), torch.stack(converged)


def bias_perturbation_effect(model: torch.nn.Module, layer: int, X: torch.Tensor, bias: str,
                             scale: float = 1.0, seed: int = 0) -> float:
    """Remark E.1 on the real module: relative change of the self-attention output (``kind="self"``)
    when ``scale * N(0, I)`` is added to its ``"query"``, ``"key"`` or ``"value"`` bias (on a copy)."""


    if bias not in ("query", "key", "value"):
        raise ValueError(f"bias must be 'query', 'key' or 'value'; got {bias!r}")
    twin = copy.deepcopy(model)
    f = maps.attention_map(twin, layer, "self")
    before = f(X)
    block = maps.layer_module(twin, layer)
    if maps.family(twin) == "bert":
        param = getattr(block.attention.self, bias).bias
    else:
        param = block.attn.c_attn.bias.split(block.attn.split_size)[("query", "key", "value").index(bias)]
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        param.add_(scale * noise.to(param))
    after = f(X)
    return ((after - before).norm() / before.norm()).item()



def textbook_multihead(X: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, W: torch.Tensor,
                       b_Q: torch.Tensor, b_K: torch.Tensor, b_V: torch.Tensor) -> torch.Tensor:
    """App. E.3, Eq. (5) as written: ``sum_h W_h sum_j softmax_j(<Q_h x_i + b_Q, K_h x_j + b_K>/√k) (V_h x_j + b_V)``.

    ``Q, K, V`` ``(H, k, d)``, ``W`` ``(H, d_out, k)``, biases ``(H, k)``; the key bias is kept (Remark E.1).
    """
    q = torch.einsum("bnd,hkd->bhnk", X, Q) + b_Q[:, None, :]
    key = torch.einsum("bnd,hkd->bhnk", X, K) + b_K[:, None, :]
    value = torch.einsum("bnd,hkd->bhnk", X, V) + b_V[:, None, :]
    P = torch.softmax(q @ key.mT / math.sqrt(Q.shape[1]), dim=-1)
    return torch.einsum("bhnk,hek->bne", P @ value, W)
