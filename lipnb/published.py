"""The paper's published code, reproduced as it computes (``vcastin/how-smooth-is-attention``), to audit it.

``published_estimator`` is the loop of ``loc_lipschitz`` in every ``compute_*.py`` script: its
``torch.func.jvp(attention, (Y,), (u,))[0]`` is the *primal* output ``f(Y)``, not ``J u``, so every
step computes ``Jᵀ f(Y)`` whatever ``u`` is and the value returned is ``√‖Jᵀ f(Y)‖``, not ``‖J‖₂``.
``published_A`` is ``compute_A`` of ``adversarial_data/toolbox.py``, whose GPT-2 branch slices the
``Conv1D`` weight (stored ``(in, out)``) along the input axis.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["published_A", "published_closed_form", "published_estimator"]

Map = Callable[[Tensor], Tensor]


def published_estimator(fn: Map, Y: Tensor, *, threshold: float = 1e-4, max_iter: int = 100,
                        seed: int = 0) -> Tensor:
    """Sec. 5 / App. E.1 as published: the ``loc_lipschitz`` loop, one value per input of a ``(B, n, d)`` batch.

    Reproduces the published iteration step by step (``jvp(...)[0]`` then ``vjp``, stop when the
    Rayleigh quotient moves by at most ``threshold``), batched: each input stops on its own test.
    """
    if Y.ndim != 3:
        raise ValueError(f"Y must be (B, n, d); got shape {tuple(Y.shape)}")
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.randn(Y.shape, generator=g, dtype=Y.dtype).to(Y.device)
    u = u / u.flatten(1).norm(dim=1).view(-1, 1, 1)
    _, vjp = torch.func.vjp(fn, Y)
    previous = torch.zeros(len(Y), dtype=Y.dtype, device=Y.device)
    for _ in range(max_iter + 1):
        v = vjp(torch.func.jvp(fn, (Y,), (u,))[0])[0]
        mu = (u * v).flatten(1).sum(1)
        if bool(((mu - previous).abs() <= threshold).all()):
            break
        previous = mu
        u = v / v.flatten(1).norm(dim=1).view(-1, 1, 1)
    return mu.clamp_min(0).sqrt().detach()


def published_closed_form(fn: Map, Y: Tensor) -> Tensor:
    """What :func:`published_estimator` converges to: ``√‖Jᵀ f(Y)‖`` for every input, by one ``vjp``."""
    out, vjp = torch.func.vjp(fn, Y)
    return vjp(out)[0].flatten(1).norm(dim=1).sqrt().detach()


def _gpt2_qkv(model: nn.Module, layer: int) -> tuple[Tensor, Tensor, Tensor]:
    """``retrieve_params`` for GPT-2: ``c_attn.weight`` ``(d, 3d)`` cut into three ``(d, d)`` blocks ``(in, out)``."""
    attn = model.h[layer].attn
    return attn.c_attn.weight.detach().split(attn.split_size, dim=1)


def published_A(model: nn.Module, layer: int, head: int) -> Tensor:
    """Sec. 5.2 as published (``compute_A``): BERT ``K_hᵀ Q_h / √k`` from ``nn.Linear`` rows; GPT-2 the same
    formula on rows ``h k:(h+1) k`` of the ``(in, out)`` ``Conv1D`` weight, i.e. along the input axis."""
    from transformers import BertModel, GPT2Model

    if isinstance(model, BertModel):
        sa = model.encoder.layer[layer].attention.self
        k = sa.attention_head_size
        rows = slice(head * k, (head + 1) * k)
        Q, K = sa.query.weight.detach()[rows], sa.key.weight.detach()[rows]
    elif isinstance(model, GPT2Model):
        q, kk, _ = _gpt2_qkv(model, layer)
        k = model.h[layer].attn.head_dim
        rows = slice(head * k, (head + 1) * k)
        Q, K = q[rows], kk[rows]
    else:
        raise TypeError(f"expected a BertModel or GPT2Model; got {type(model).__name__}")
    return K.T @ Q / math.sqrt(k)

