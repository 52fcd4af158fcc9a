"""Kim et al.'s Theorem 3.2 against the local constants inputs reach (chapter *L2 self-attention and its Lipschitz
bound*): random inputs over head layouts, lengths and radii, and inputs optimised for the largest constant.

Each ratio is the largest local constant over a batch of inputs divided by the bound it is checked against:
the 2-norm one from :func:`lipnb.core.lipschitz.local_lipschitz` (Lanczos on the closed-form products), the
∞-norm one exact (largest absolute row sum of the dense float64 Jacobian). A ratio above one is an input that
breaks the bound.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..core.l2_bounds import exact_local_lipschitz_inf, softmax_distance_sum, theorem_3_2_inf, theorem_3_2_two
from ..core.l2_self_attention import L2AttentionMap, L2Heads, random_l2_heads
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress
from .l2_tightness import jacobian_norm, maximize_l2_lipschitz, proof_start

__all__ = ["lambert_grid_maxima", "optimised_input_ratios", "random_input_ratios", "scaled_heads"]


def lambert_grid_maxima(lengths: tuple[int, ...], *, z_max: float = 12.0, points: int = 240_001) -> Tensor:
    """The largest value of Theorem 3.2's softmax-weighted distance sum (:func:`softmax_distance_sum`) over equal
    squared distances ``z`` on a grid of ``points`` in ``[0, z_max]``, for each number of tokens ``N`` of
    ``lengths`` (``N - 1`` others): the value the proof's Lambert-W term must equal, float64 ``(len(lengths),)``."""
    if any(int(N) < 2 for N in lengths):
        raise ValueError(f"every length must be at least 2 tokens; got {lengths}")
    z = torch.linspace(0, z_max, points, dtype=torch.float64)
    return torch.stack([softmax_distance_sum(z[:, None].expand(-1, int(N) - 1)).max() for N in lengths])


def random_input_ratios(layouts: tuple[tuple[int, int], ...] = ((2, 1), (4, 2), (8, 2)),
                        lengths: tuple[int, ...] = (4, 16), radii: tuple[float, ...] = (0.3, 3.0), *,
                        batch: int = 16, scale: float = 2.0, seed: int = 0) -> ResultTable:
    """Theorem 3.2 on random inputs: for each head layout ``(D, H)`` (random heads, :func:`random_l2_heads` with
    ``scale`` and the seed ``D + H``), length ``N`` and radius, ``batch`` Gaussian inputs of that scale.

    Columns ``D, H, N, radius``, ``two`` (largest 2-norm constant over the 2-norm bound with Kim et al.'s ``c =
    4``), ``two_sharpened`` (over the bound with ``c = 2√2``) and ``inf`` (largest ∞-norm constant over the ∞-norm
    bound). Cached.
    """
    def compute() -> dict[str, list]:
        cols: dict[str, list] = {k: [] for k in ("D", "H", "N", "radius", "two", "two_sharpened", "inf")}
        g = torch.Generator().manual_seed(seed)
        for D, H in progress(layouts, "random inputs"):
            heads = random_l2_heads(D, H, seed=D + H, scale=scale)
            F = L2AttentionMap(heads)
            for N in lengths:
                for radius in radii:
                    X = radius * torch.randn(batch, N, D, dtype=torch.float64, generator=g)
                    two = float(local_lipschitz(F, X, tol=1e-10).max())
                    inf = float(exact_local_lipschitz_inf(F, X).max())
                    row = (D, H, N, radius, two / float(theorem_3_2_two(heads, N)),
                           two / float(theorem_3_2_two(heads, N, sharpened=True)),
                           inf / float(theorem_3_2_inf(heads, N)))
                    for key, value in zip(cols, row, strict=True):
                        cols[key].append(value)
        return cols

    return cached_table("l2_random_ratios", {"layouts": [list(x) for x in layouts], "lengths": list(lengths),
                                             "radii": list(radii), "batch": batch, "scale": scale, "seed": seed},
                        compute)


def scaled_heads(heads: L2Heads, q: float, v: float, o: float) -> L2Heads:
    """``heads`` with ``W^Q``, ``W^V`` and ``W^O`` multiplied by ``q``, ``v`` and ``o`` (no output matrix: the
    identity, scaled)."""
    W = torch.eye(heads.V.shape[0] * heads.V.shape[2], dtype=heads.V.dtype) if heads.W is None else heads.W
    return L2Heads(Q=q * heads.Q, V=v * heads.V, W=o * W)


def _ratio(heads: L2Heads, X: Tensor, norm: str) -> float:
    """The largest exact local constant over ``X`` divided by Theorem 3.2's bound (2-norm sharpened)."""
    N = X.shape[1]
    bound = theorem_3_2_inf(heads, N) if norm == "inf" else theorem_3_2_two(heads, N, sharpened=True)
    return float(jacobian_norm(heads, X, norm).max() / bound)


def optimised_input_ratios(heads: L2Heads, lengths: tuple[int, ...] = (4, 8), *, restarts: int = 3,
                           steps: int = 60, seed: int = 0,
                           scales: tuple[float, float, float] = (3.0, 2.0, 1.5)) -> ResultTable:
    """Theorem 3.2 at optimised inputs: for each ``N``, gradient ascent (:func:`maximize_l2_lipschitz`) on the
    exact 2-norm and ∞-norm local constants from ``restarts`` random starts and as many of the proof's
    (:func:`proof_start`), all kept.

    Columns ``N``, ``norm`` (``"2"`` or ``"inf"``), ``ratio`` (the largest constant reached over the bound, the
    2-norm one sharpened), and ``scaled_ratio``: the same at the inputs divided by ``scales[0]``, for the heads
    with ``W^Q, W^V, W^O`` scaled by ``scales`` (:func:`scaled_heads`), which equals ``ratio`` exactly when the
    bound carries the powers of the weight norms the map does (``s²·t·u``).
    """
    cols: dict[str, list] = {k: [] for k in ("N", "norm", "ratio", "scaled_ratio")}
    g = torch.Generator().manual_seed(seed)
    D = heads.Q.shape[1]
    scaled = scaled_heads(heads, *scales)
    for N in lengths:
        starts = torch.cat([torch.randn(restarts, N, D, dtype=torch.float64, generator=g),
                            proof_start(heads, restarts, N, seed=seed + N)])
        for norm in ("2", "inf"):
            best, _ = maximize_l2_lipschitz(heads, starts, norm, steps=steps)
            row = (N, norm, _ratio(heads, best, norm), _ratio(scaled, best / scales[0], norm))
            for key, value in zip(cols, row, strict=True):
                cols[key].append(value)
    return ResultTable.from_columns(cols, {"lengths": list(lengths), "restarts": restarts, "steps": steps,
                                           "seed": seed, "scales": list(scales)})
