"""The paper's published code, reproduced as it computes (``vcastin/how-smooth-is-attention``), to audit it.

``published_estimator`` is the loop of ``loc_lipschitz`` in every ``compute_*.py`` script: its
``torch.func.jvp(attention, (Y,), (u,))[0]`` is the *primal* output ``f(Y)``, not ``J u``, so every
step computes ``Jᵀ f(Y)`` whatever ``u`` is and the value returned is ``√‖Jᵀ f(Y)‖``, not ``‖J‖₂``;
unless the first step already passes the stopping test (``|⟨u₀, Jᵀ f⟩| ≤ threshold``), when it returns
``√⟨u₀, Jᵀ f⟩``, NaN if negative. Each script runs the loop one input at a time with its own threshold
and iteration cap (:data:`SCRIPT_SETTINGS`). ``published_A`` is ``compute_A`` of
``adversarial_data/toolbox.py``, whose GPT-2 branch slices the ``Conv1D`` weight (stored ``(in, out)``)
along the input axis. Beside them, the loop as the paper's text intends it (App. E.1: ``J u``, then ``Jᵀ J u``),
``paper_power_iteration``, the baseline every benchmark times.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from scipy.special import betainc
from torch import Tensor, nn
from transformers import BertModel, GPT2Model

from ..models.maps import head_matrices, num_layers
from .paper_numbers import PUBLISHED, value

__all__ = ["PAPER_MAX_ITER", "PAPER_TOL", "SCRIPT_SETTINGS", "PublishedRun", "first_step_stop_probability",
           "paper_power_iteration", "published_A", "published_A_cosines", "published_closed_form",
           "published_estimator", "published_run"]

Map = Callable[[Tensor], Tensor]

# (threshold, max_iter) of ``loc_lipschitz`` in each published script, read from the table of published numbers.
SCRIPT_SETTINGS: dict[str, tuple[float, int]] = {
    key.split(":", 1)[1]: (value(key), int(value("max_iter:" + key.split(":", 1)[1])))
    for key in (n.key for n in PUBLISHED) if key.startswith("threshold:")
}

# App. E.1 as intended (the stopping test and cap of the paper's text), the benchmarks' baseline.
PAPER_TOL, PAPER_MAX_ITER = 1e-4, 100


class PublishedRun(NamedTuple):
    """One run of the published loop on a batch: the value returned, the steps taken, the first quotient."""

    value: Tensor
    steps: Tensor
    first: Tensor
    first_norm: Tensor


def published_run(fn: Map, Y: Tensor, *, threshold: float = 1e-4, max_iter: int = 100, seed: int = 0) -> PublishedRun:
    """Sec. 5 / App. E.1 as published: the ``loc_lipschitz`` loop on every input of a ``(B, n, d)`` batch.

    Each input runs as the scripts run it, alone: it stops on its own test ``|μ_k - μ_{k-1}| ≤ threshold``
    (``μ_{-1} = 0``, so a first quotient within ``threshold`` of zero stops at once) or after
    ``max_iter + 1`` quotients, and returns ``μ ** 0.5`` (NaN when ``μ < 0``). ``steps`` counts the
    quotients computed; ``first_norm`` is ``‖Jᵀ f(Y)‖`` of the first step. ``u₀`` is drawn from ``seed``.
    """
    if Y.ndim != 3:
        raise ValueError(f"Y must be (B, n, d); got shape {tuple(Y.shape)}")
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0; got {threshold}")
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.randn(Y.shape, generator=g, dtype=Y.dtype).to(Y.device)
    u = u / u.flatten(1).norm(dim=1).view(-1, 1, 1)
    _, vjp = torch.func.vjp(fn, Y)
    mu = previous = torch.zeros(len(Y), dtype=Y.dtype, device=Y.device)
    active = torch.ones(len(Y), dtype=torch.bool, device=Y.device)
    steps = torch.zeros(len(Y), dtype=torch.long, device=Y.device)
    first = first_norm = None
    for _ in range(max_iter + 1):
        v = vjp(torch.func.jvp(fn, (Y,), (u,))[0])[0].detach()
        norm = v.flatten(1).norm(dim=1)
        mu = torch.where(active, (u * v).flatten(1).sum(1), mu)
        steps += active.long()
        if first is None:
            first, first_norm = mu.clone(), norm
        active = active & ((mu - previous).abs() > threshold)
        if not bool(active.any()):
            break
        previous = torch.where(active, mu, previous)
        u = torch.where(active.view(-1, 1, 1), v / norm.view(-1, 1, 1), u)
    return PublishedRun(mu.sqrt().detach(), steps, first.detach(), first_norm.detach())


def _norm(v: Tensor) -> Tensor:
    """Euclidean norm by a cascade sum: torch's float32 CPU ``vector_norm`` drifts on long vectors."""
    return (v * v).sum().sqrt()


def paper_power_iteration(fn: Callable[[Tensor], Tensor], x: Tensor, *, seed: int = 0, target: float | None = None,
                          rtol: float = 1e-4, max_iter: int = PAPER_MAX_ITER) -> tuple[float, int]:
    """App. E.1 as the paper runs it, on one input ``x`` ``(1, n, d)``: ``(Lip_x(fn) estimate, steps)``.

    Each step a ``torch.func.jvp`` and a ``torch.func.vjp`` through ``fn`` (each re-running the forward
    pass), then ``u <- JᵀJ u / ||JᵀJ u||``; it stops when the estimate of ``||J||²`` moves by less than
    ``1e-4`` (absolute), after at most ``max_iter`` (the paper's 100) steps. Norms are cascade sums, so the
    loop runs at its best. Given ``target`` (a reference ``Lip_x(fn)``), the same loop stops instead at the
    first step whose estimate is within ``rtol`` of it: an oracle no user has, so the fewest steps the
    paper's loop needs to be that accurate (a baseline at equal accuracy where its own test stops early).
    """
    generator = torch.Generator(device=x.device).manual_seed(seed)
    u = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    u = u / _norm(u)
    previous, steps = None, 0
    while steps < max_iter:
        steps += 1
        _, Ju = torch.func.jvp(fn, (x,), (u,))
        _, pullback = torch.func.vjp(fn, x)
        (JtJu,) = pullback(Ju)
        estimate = float((u * JtJu).sum())
        u = JtJu / _norm(JtJu)
        if target is not None:
            if abs(max(estimate, 0.0) ** 0.5 / target - 1) <= rtol:
                break
        elif previous is not None and abs(estimate - previous) < PAPER_TOL:
            break
        previous = estimate
    return max(estimate, 0.0) ** 0.5, steps


def published_estimator(fn: Map, Y: Tensor, *, threshold: float = 1e-4, max_iter: int = 100,
                        seed: int = 0) -> Tensor:
    """The value :func:`published_run` returns for every input (``√‖Jᵀ f(Y)‖`` unless the first step stops it)."""
    return published_run(fn, Y, threshold=threshold, max_iter=max_iter, seed=seed).value


def published_closed_form(fn: Map, Y: Tensor) -> Tensor:
    """What :func:`published_estimator` converges to: ``√‖Jᵀ f(Y)‖`` for every input, by one ``vjp``."""
    out, vjp = torch.func.vjp(fn, Y)
    return vjp(out)[0].flatten(1).norm(dim=1).sqrt().detach()


def first_step_stop_probability(norm: Tensor, size: int, threshold: float) -> Tensor:
    """``P(|⟨u₀, w⟩| ≤ threshold)`` for ``u₀`` uniform on the unit sphere of ``R^size`` and ``‖w‖ = norm``.

    ``⟨u₀, w⟩ / ‖w‖`` is one coordinate of a uniform unit vector, whose square is ``Beta(1/2, (size-1)/2)``:
    the published loop stops at its first step with this probability (half of it returning NaN).
    """
    if size < 2:
        raise ValueError(f"size must be >= 2; got {size}")
    ratio = (threshold / norm.double().cpu()).square().clamp(max=1.0)
    return torch.as_tensor(betainc(0.5, (size - 1) / 2, ratio.numpy()), dtype=torch.float64).to(norm.device)


def _gpt2_qkv(model: nn.Module, layer: int) -> tuple[Tensor, Tensor, Tensor]:
    """``retrieve_params`` for GPT-2: ``c_attn.weight`` ``(d, 3d)`` cut into three ``(d, d)`` blocks ``(in, out)``."""
    attn = model.h[layer].attn
    return attn.c_attn.weight.detach().split(attn.split_size, dim=1)


def published_A(model: nn.Module, layer: int, head: int) -> Tensor:
    """Sec. 5.2 as published (``compute_A``): BERT ``K_hᵀ Q_h / √k`` from ``nn.Linear`` rows; GPT-2 the same
    formula on rows ``h k:(h+1) k`` of the ``(in, out)`` ``Conv1D`` weight, i.e. along the input axis."""

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


def published_A_cosines(model: nn.Module) -> Tensor:
    """The cosine between :func:`published_A` and the head's true ``A_h`` (:func:`lipnb.models.head_matrices`),
    as flattened matrices, for every layer and head: ``(layers, heads)``."""
    rows = []
    for layer in range(num_layers(model)):
        true = head_matrices(model, layer).A                       # every head of the layer, factored once
        rows.append([torch.nn.functional.cosine_similarity(published_A(model, layer, head).flatten(),
                                                            true[head].flatten(), 0).item()
                     for head in range(len(true))])
    return torch.tensor(rows)
