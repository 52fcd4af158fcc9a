"""Multi-head attention and its biases measured (Lemma 3.8 and App. E.3 of Castin et al.): the chain from a
layer's measured constant to the bound, head by head, Lemma E.2 summed over heads, Theorem E.3 per head, and
gradient ascent against the bound with biases."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..arguments import check_bool, check_positive_int, check_tokens
from ..core.attention import MultiHead, single_head
from ..core.bounds import theorem_c_3, theorem_e_3, theorem_e_3_sharpened
from ..core.dense import exact_local_lipschitz
from ..core.inputs import maximize_local_lipschitz
from ..core.jacobian import MultiHeadMap, lemma_c_2_jvp
from ..core.lipschitz import local_lipschitz
from ..data import dataset_text, token_sequences
from ..models.loading import load
from ..models.maps import attention_inputs, head_matrices
from ..results import ResultTable, cached_table, progress
from .synthetic import radius_grid

__all__ = ["bias_ascent_sweep", "layer_ladder", "lemma_3_8_ladder", "lemma_e_2_jvp", "theorem_e_3_per_head",
           "without_biases"]


def lemma_e_2_jvp(X: torch.Tensor, heads: MultiHead, E: torch.Tensor) -> torch.Tensor:
    """Lemma E.2 summed over heads: ``Σ_h (I ⊗ W_h) D_X f^h(E)`` with each head's score bias, ``(B, n, d_out)``.

    The key, value and output biases do not enter (Remark E.1): each head is Lemma C.2 with the value map
    ``W_h V_h`` and scores ``<A_h x_i + c_h, x_j>``."""
    check_tokens(X)
    return sum(lemma_c_2_jvp(X, heads.A[h], heads.W[h] @ heads.V[h], E,
                             score_bias=None if heads.score_bias is None else heads.score_bias[h])
               for h in range(heads.num_heads))


def theorem_e_3_per_head(heads: MultiHead, R: float | torch.Tensor, n: int, *, biases: bool = True,
                         sharpened: bool = False) -> torch.Tensor:
    """Theorem E.3 (or our sharpening, ``4n`` -> ``n``) for every head on ``B_R^n``, ``(H,)``; without the score
    bias when ``biases`` is false. :func:`~lipnb.core.bounds.multihead_bound` weighs these by ``||W_h||_2``."""
    biases, sharpened = check_bool(biases, "biases"), check_bool(sharpened, "sharpened")
    bound = theorem_e_3_sharpened if sharpened else theorem_e_3
    return torch.stack([bound(heads.A[h], heads.V[h], R, n,
                              heads.score_bias[h] if biases and heads.score_bias is not None else None)
                        for h in range(heads.num_heads)])


def lemma_3_8_ladder(heads: MultiHead, X: torch.Tensor, *, exact: bool = False,
                     unit: bool = False) -> dict[str, torch.Tensor]:
    """Lemma 3.8 and its sharper forms at each input: ``measured`` ``Lip_X(f^MH)`` ``(B,)``; per head ``(H, B)``
    ``heads`` ``Lip_X(f^h)`` (with its biases), ``projected`` ``Lip_X(W_h f^h)`` and, if ``unit``, ``unit``
    ``Lip_X(g^h)`` (the head with ``V = W = I`` and no value bias); ``converged`` (``(B,)``, every estimate
    converged).

    ``exact``: dense float64 Jacobians (small layers); otherwise Lanczos (:func:`~lipnb.local_lipschitz`)."""
    check_tokens(X)
    exact, unit = check_bool(exact, "exact"), check_bool(unit, "unit")
    d = heads.A.shape[-1]
    eye = torch.eye(d, dtype=heads.A.dtype, device=heads.A.device)

    def unit_head(h: int) -> MultiHead:
        bias = None if heads.score_bias is None else heads.score_bias[h:h + 1]
        return MultiHead(heads.A[h:h + 1], eye[None], eye[None], bias)

    maps = {"measured": [heads],
            "heads": [single_head(heads, h) for h in range(heads.num_heads)],
            "projected": [single_head(heads, h, project=True) for h in range(heads.num_heads)]}
    if unit:
        maps["unit"] = [unit_head(h) for h in range(heads.num_heads)]
    out: dict[str, torch.Tensor] = {}
    converged = torch.ones(X.shape[0], dtype=torch.bool, device=X.device)
    for name, layers in maps.items():
        values = []
        for layer in layers:
            if exact:
                values.append(exact_local_lipschitz(MultiHeadMap(layer), X))
            else:
                result = local_lipschitz(MultiHeadMap(layer), X, detailed=True)
                values.append(result.value)
                converged &= result.converged
        out[name] = values[0] if name == "measured" else torch.stack(values)
    out["converged"] = converged
    return out


def bias_ascent_sweep(radii: Iterable[float], *, n: int = 4, d: int = 3, starts: int = 6, steps: int = 60,
                      seed: int = 0) -> ResultTable:
    """Theorem E.3 and our sharpening against projected gradient ascent on the exact local constant of one random
    head with query and value biases (``Q, K, V`` Gaussian, ``W = I``), from ``starts`` Gaussian starts scaled by
    ``R``, one head per radius.

    Per radius: ``best`` (the largest constant found), ``sharpened``, ``stated`` (Theorem E.3) and ``data_bound``
    (Theorem C.3 with the score bias, at the best input). A cached table."""
    radii_t = radius_grid(radii, "radii")
    n, d = check_positive_int(n, "n", 2), check_positive_int(d, "d")
    starts, steps = check_positive_int(starts, "starts"), check_positive_int(steps, "steps")
    seed = check_positive_int(seed, "seed", 0)
    params = {"radii": radii_t.tolist(), "n": n, "d": d, "starts": starts, "steps": steps, "seed": seed}

    def compute() -> dict[str, list]:
        gen = torch.Generator().manual_seed(seed)
        rows: dict[str, list] = {"R": [], "best": [], "sharpened": [], "stated": [], "data_bound": []}
        for R in progress(radii_t.tolist(), desc="bias ascent"):
            Q, K, V = torch.randn(3, 1, d, d, generator=gen, dtype=torch.float64)
            head = MultiHead.from_projections(
                Q, K, V, torch.eye(d, dtype=torch.float64)[None],
                q_bias=torch.randn(1, d, generator=gen, dtype=torch.float64),
                v_bias=torch.randn(1, d, generator=gen, dtype=torch.float64))
            X0 = R * torch.randn(starts, n, d, generator=gen, dtype=torch.float64)
            X_best, best = maximize_local_lipschitz(MultiHeadMap(head), X0, R, steps=steps)
            k = int(best.argmax())
            c = head.score_bias[0]
            rows["R"].append(R)
            rows["best"].append(best[k].item())
            rows["sharpened"].append(theorem_e_3_sharpened(head.A[0], head.V[0], R, n, c).item())
            rows["stated"].append(theorem_e_3(head.A[0], head.V[0], R, n, c).item())
            rows["data_bound"].append(theorem_c_3(X_best[k:k + 1], head.A[0], head.V[0], score_bias=c).item())
        return rows

    return cached_table("bias_ascent_sweep", params, compute)


def without_biases(heads: MultiHead) -> MultiHead:
    """The same heads with every bias removed (score, value and output)."""
    return MultiHead(heads.A, heads.V, heads.W)


def layer_ladder(model: str, layer: int, n: int, per_length: int, *, biases: bool = True,
                 text: str = "alice") -> dict[str, torch.Tensor]:
    """:func:`lemma_3_8_ladder` (Lanczos) of a real layer's multi-head attention in float64, with or without its
    biases, on ``per_length`` windows of ``n`` tokens of ``text`` captured at the layer's input. A cached table,
    returned as the ladder's tensors."""
    layer, n = check_positive_int(layer, "layer", 0), check_positive_int(n, "n", 2)
    per_length, biases = check_positive_int(per_length, "per_length"), check_bool(biases, "biases")
    params = {"model": model, "layer": layer, "n": n, "per_length": per_length, "biases": biases, "text": text}

    def compute() -> dict[str, list]:
        net, tokenizer = load(model)
        net.double()
        ids = token_sequences(dataset_text(text), tokenizer, [n], per_length)[n]
        X = attention_inputs(net, layer, ids)
        heads = head_matrices(net, layer)
        ladder = lemma_3_8_ladder(heads if biases else without_biases(heads), X)
        B = ladder["heads"].shape[1]
        rows: dict[str, list] = {"kind": [], "head": [], "window": [], "lip": [], "converged": []}
        for kind in ("measured", "heads", "projected"):
            values = ladder[kind].reshape(-1, B)
            for h, row in enumerate(values):
                rows["kind"] += [kind] * B
                rows["head"] += [h if kind != "measured" else -1] * B
                rows["window"] += list(range(B))
                rows["lip"] += row.tolist()
                rows["converged"] += ladder["converged"].int().tolist()
        return rows

    table = cached_table("layer_ladder", params, compute)
    out = {"measured": table.where(kind="measured")["lip"]}
    for kind in ("heads", "projected"):
        out[kind] = table.where(kind=kind).pivot("lip", "head", "window")
    out["converged"] = table.where(kind="measured")["converged"].bool()
    return out
