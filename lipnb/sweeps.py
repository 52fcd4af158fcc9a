"""The cached sweeps behind Part I's figures (Theorem 3.3, Prop. 3.4, Theorem 3.7 on synthetic and real inputs)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from . import bounds
from .inputs import ball_tokens, head_spectra, random_head
from .jacobian import selection_jacobian
from .lipschitz import jacobian_matrix, local_lipschitz
from .measures import repeated_token_lipschitz
from .results import ResultTable, cached_table, progress
from .stats import fit_line

__all__ = [
    "head_gamma_table",
    "large_radius_error",
    "large_radius_sweep",
    "lemma_c_7_constants",
    "quadratic_growth_slopes",
    "real_adversarial_sweep",
    "real_lipschitz_sweep",
    "synthetic_bound_sweep",
]


def large_radius_sweep(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Theorem 3.7: ``(||D_{RX} f - S||_2, ||D_{RX} f||_2)`` for each radius ``R``, one sequence ``X`` ``(1, n, d)``.

    Dense float64 Jacobians; ``S`` is :func:`selection_jacobian` at ``X`` (the argmax does not depend on ``R > 0``).
    """
    from .attention import self_attention

    X, A, V = X.double(), A.double(), V.double()
    R = torch.as_tensor(radii, dtype=torch.float64).reshape(-1, 1, 1)
    J = jacobian_matrix(lambda Z: self_attention(Z, A, V, masked=masked), R * X)
    S = selection_jacobian(X, A, V, masked=masked)
    return torch.linalg.matrix_norm(J - S, ord=2), torch.linalg.matrix_norm(J, ord=2)


def large_radius_error(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> torch.Tensor:
    """Theorem 3.7: ``||D_{RX} f - S||_2`` for each radius ``R`` (see :func:`large_radius_sweep`), ``(len(radii),)``."""
    return large_radius_sweep(X, A, V, radii, masked=masked)[0]


def quadratic_growth_slopes(n: int, d: int, radii: torch.Tensor, replicates: int, *,
                            seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """App. C.7 / Kim et al. (2021): ``Lip_X(f)`` at :func:`~lipnb.adversarial.quadratic_growth_input`, ``(reps, R)``.

    Each replicate draws its own ``A``, ``V`` (i.i.d. Gaussian, variance ``1/d``) and its own tokens; returns
    the dense float64 constants at every radius and each replicate's log-log slope.
    """
    from .attention import self_attention
    from .inputs import quadratic_growth_input

    g = torch.Generator().manual_seed(seed)
    radii = torch.as_tensor(radii, dtype=torch.float64)
    constants = []
    for r in range(replicates):
        A = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        V = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        X = quadratic_growth_input(radii, n, d, seed=seed * 100_003 + r)
        J = jacobian_matrix(lambda Z, A=A, V=V: self_attention(Z, A, V), X)
        constants.append(torch.linalg.matrix_norm(J, ord=2))
    constants = torch.stack(constants)
    slopes = torch.tensor([fit_line(radii.log(), c.log()).slope for c in constants], dtype=torch.float64)
    return constants, slopes


def lemma_c_7_constants(A: torch.Tensor, R: float, ns: Iterable[int], *, case: str = "auto") -> torch.Tensor:
    """Lemma C.7: the exact ``Lip_X(f)`` (``V = I``) at the lemma's input for each ``n``, through two Diracs.

    The input is two distinct tokens repeated ``1`` and ``n - 1`` times, so :func:`repeated_token_lipschitz`
    gives the exact constant at a cost independent of ``n``; returns ``(len(ns),)``, float64.
    """
    from .inputs import lemma_c_7_input

    A = A.double()
    Y = lemma_c_7_input(A, R, 2, case=case)
    eye = torch.eye(A.shape[0], dtype=torch.float64)
    return torch.cat([repeated_token_lipschitz(Y, A, eye, torch.tensor([1, n - 1])) for n in ns])


def real_lipschitz_sweep(model_name: str, layer: int, lengths: Iterable[int], per_length: int) -> ResultTable:
    """Sec. 5.1 on one layer: ``Lip_X`` of the ``"mha"`` map at Alice sequences, with the bounds of Theorem 3.3.

    The model runs in float32 and Lanczos stops at relative residual ``1e-4``, as in the paper (App. E.1);
    the bounds are computed in float64. Returns float64 tensors, one entry per sequence: ``n``, ``lip``,
    ``radius`` (largest token norm, so ``X`` lies in ``B_R^n``), ``mean_radius``, ``bound`` (Lemma 3.8 +
    Theorem E.3 at ``radius``), ``data_bound`` (Lemma 3.8 + Theorem C.3 at ``X``) and ``column_sum``, the
    largest ``Σ_i P_ij`` over tokens ``j`` and heads (where Theorem 3.3's ``√n`` comes from). A cached table.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "layer": layer, "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, torch.Tensor]:
        from . import data, models
        from .attention import attention_matrix

        model, tokenizer = models.load(model_name)
        sequences = data.token_sequences(data.alice_text(), tokenizer, lengths, per_length)
        f = models.attention_map(model, layer, "mha")
        heads = models.head_matrices(model, layer)
        masked = models.is_decoder(model)
        keys = ("n", "lip", "radius", "mean_radius", "bound", "data_bound", "column_sum")
        rows: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
        for n in progress(lengths, desc=f"{model_name} layer {layer}"):
            X = models.attention_inputs(model, layer, sequences[n])
            rows["lip"].append(local_lipschitz(f, X, tol=1e-4).double())
            X = X.double()
            norms = X.norm(dim=-1)
            rows["n"].append(torch.full((len(X),), float(n), dtype=torch.float64))
            rows["radius"].append(norms.amax(1))
            rows["mean_radius"].append(norms.mean(1))
            rows["bound"].append(bounds.multihead_bound(heads, norms.amax(1), n))
            rows["data_bound"].append(bounds.multihead_data_bound(X, heads, masked=masked))
            P = attention_matrix(X, heads.A.double(), score_bias=heads.score_bias.double(), masked=masked)
            rows["column_sum"].append(P.sum(-2).flatten(1).amax(1))
        return {k: torch.cat(v) for k, v in rows.items()}

    return cached_table("real_lipschitz_sweep", params, compute)


def real_adversarial_sweep(model_name: str, layer: int, head: int, R: float,
                           lengths: Iterable[int]) -> ResultTable:
    """Sec. 5.2 on one layer: ``Lip_X`` of the ``"mha"`` map at Lemma C.7's input built on head ``head``.

    The input uses ``A_head`` and the case rule of Sec. 5.2, radius ``R``; float32 and Lanczos tolerance ``1e-4``
    as in :func:`real_lipschitz_sweep`. Columns ``n`` and ``lip``; a cached table.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "layer": layer, "head": head, "R": round(float(R), 6), "lengths": lengths}

    def compute() -> dict[str, torch.Tensor]:
        from . import models
        from .inputs import lemma_c_7_input

        model, _ = models.load(model_name)
        f = models.attention_map(model, layer, "mha")
        A = models.head_matrices(model, layer).A[head].double()
        X = lemma_c_7_input(A, float(R), max(lengths)).float()
        lip = [local_lipschitz(f, X[:, :n], tol=1e-4).double() for n in progress(lengths, desc="adversarial")]
        return {"n": torch.tensor(lengths, dtype=torch.float64), "lip": torch.cat(lip)}

    return cached_table("real_adversarial_sweep", params, compute)


def head_gamma_table(model_name: str, lengths: Iterable[int], per_length: int) -> ResultTable:
    """App. C.5: ``γ_h`` (Prop. 3.4) of every head of every layer, and each layer's mean token radius on Alice.

    One row per ``layer`` and ``head``: ``gamma``, ``positive`` (1 where Sec. 5.2's rule picks the positive
    case) and ``radius``, the mean norm of the tokens entering the layer's attention over all sequences of
    ``lengths`` (the same for every head of a layer). A cached table; ``table.pivot("gamma", "layer", "head")``
    gives the ``(L, H)`` matrix.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, torch.Tensor]:
        from . import data, models

        model, tokenizer = models.load(model_name)
        sequences = data.token_sequences(data.alice_text(), tokenizer, lengths, per_length)
        layers = list(range(models.num_layers(model)))
        norms: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
        for n in lengths:
            inputs = models.attention_inputs(model, layers, sequences[n])
            for i in layers:
                norms[i].append(inputs[i].double().norm(dim=-1).flatten())
        spectra = [head_spectra(models.head_matrices(model, i).A) for i in progress(layers, desc="heads")]
        gamma = torch.stack([s.gamma for s in spectra])
        L, H = gamma.shape
        radius = torch.stack([torch.cat(norms[i]).mean() for i in layers])
        return {"layer": torch.arange(L).repeat_interleave(H), "head": torch.arange(H).repeat(L),
                "gamma": gamma.flatten(), "positive": torch.stack([s.positive for s in spectra]).flatten().long(),
                "radius": radius.repeat_interleave(H)}

    return cached_table("head_gamma_table", params, compute)


def synthetic_bound_sweep(d: int, seed: int, R: float, lengths: Iterable[int], per_length: int) -> ResultTable:
    """Theorem 3.3 vs measurement for ``A = random_head(d, seed)``, ``V = I`` on ``B_R^n``, for each ``n``.

    Two input families in column ``inputs``: ``"random"`` (``per_length`` sequences uniform in the ball) and
    ``"adversarial"`` (Lemma C.7's input, Sec. 5.2's case rule); per row ``n``, ``lip`` (Lanczos), ``bound``
    (Theorem 3.3), ``data_bound`` (Theorem C.3) and ``column_sum`` (largest ``Σ_i P_ij``). A cached table.
    """
    from .attention import attention_matrix, self_attention
    from .bounds import theorem_3_3, theorem_c_3
    from .inputs import lemma_c_7_input

    lengths = [int(n) for n in lengths]
    params = {"d": d, "seed": seed, "R": round(float(R), 9), "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, list]:
        A = random_head(d, seed)
        V = torch.eye(d, dtype=torch.float64)
        f = lambda Z: self_attention(Z, A, V)  # noqa: E731
        rows: dict[str, list] = {"inputs": [], "n": [], "lip": [], "bound": [], "data_bound": [], "column_sum": []}
        for n in progress(lengths, desc="synthetic"):
            inputs = {"random": ball_tokens(per_length, n, d, R, seed=seed + n),
                      "adversarial": lemma_c_7_input(A, R, n)}
            for name, X in inputs.items():
                rows["inputs"] += [name] * len(X)
                rows["n"] += [n] * len(X)
                rows["lip"] += local_lipschitz(f, X, max_iter=500).tolist()
                rows["bound"] += theorem_3_3(A, V, R, n).expand(len(X)).tolist()
                rows["data_bound"] += theorem_c_3(X, A, V).tolist()
                rows["column_sum"] += attention_matrix(X, A).sum(1).amax(1).tolist()
        return rows

    return cached_table("synthetic_bound_sweep", params, compute)
