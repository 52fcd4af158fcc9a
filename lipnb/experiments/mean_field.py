"""Mean-field attention measured (Sec. 3.2 and App. C.4-C.6 of Castin et al.): Wasserstein ratios of moved
measures, a light atom added to a measure, Theorem 3.5 against exact constants, and the two-Dirac measures of
Proposition 3.6 in both of its forms."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..arguments import check_lengths, check_positive_int, check_tokens
from ..core.attention import self_attention
from ..core.bounds import gamma, theorem_3_5, theorem_3_5_sharpened, two_dirac_constant
from ..core.dense import exact_local_lipschitz
from ..core.inputs import ball_tokens, lemma_c_7_input, proposition_3_6_measure, real_eigenpairs
from ..core.lipschitz import local_lipschitz
from ..core.measures import own_query_norms, wasserstein2_empirical, weighted_attention_lipschitz
from ..results import ResultTable, cached_table, progress
from .synthetic import ball_grid, lemma_c_7_constants

__all__ = [
    "LightAtom",
    "light_atom_sweep",
    "mean_field_bound_sweep",
    "two_dirac_finite_n",
    "two_dirac_sweep",
    "wasserstein_ratios",
]

Map = Callable[[torch.Tensor], torch.Tensor]


def wasserstein_ratios(f: Map, X: torch.Tensor, directions: torch.Tensor, steps: Iterable[float]) -> torch.Tensor:
    """Lemma C.5 and Lemma 3.2: ``W2(μ_f(X + tD), μ_f(X)) / W2(μ_(X + tD), μ_X)``, exact, ``(len(D), len(steps))``.

    ``X`` is one sequence ``(1, n, d)``, ``directions`` ``(k, n, d)``; every moved input goes through ``f`` in one
    batch, and each ``W_2`` between empirical measures is an exact assignment problem."""
    check_tokens(X)
    if X.shape[0] != 1 or directions.dim() != 3 or directions.shape[1:] != X.shape[1:]:
        raise ValueError(f"need X (1, n, d) and directions (k, n, d); got {tuple(X.shape)}, "
                         f"{tuple(directions.shape)}")
    t = torch.as_tensor(list(steps), dtype=torch.float64)
    if not len(t) or bool((t <= 0).any()):
        raise ValueError(f"steps must be a non-empty list of positive sizes; got {t.tolist()}")
    X, D = X.double(), directions.double()
    moved = (X + t.view(-1, 1, 1, 1) * D).reshape(-1, *X.shape[1:])  # (len(t) * k, n, d)
    out, base = f(moved), f(X)[0]
    ratios = [wasserstein2_empirical(out[i], base) / wasserstein2_empirical(moved[i], X[0]) for i in range(len(moved))]
    return torch.tensor(ratios, dtype=torch.float64).view(len(t), len(D)).T


@dataclass(frozen=True)
class LightAtom:
    """A light atom added to a measure in the plane (our complement to Lemma C.5): the grid, the own-query
    norm ``||V Cov_μ(z) A||_2`` at each grid point, its supremum, the maximisers and the weighted norm of
    ``(1 - ε) μ + ε δ_z`` at each maximiser ``z`` (rows) and mass ``ε`` (columns)."""

    grid: torch.Tensor
    values: torch.Tensor
    sup: float
    maximisers: torch.Tensor
    counts: dict[float, int]
    eps: torch.Tensor
    lip: torch.Tensor


def light_atom_sweep(Y: torch.Tensor, w: torch.Tensor, A: torch.Tensor, V: torch.Tensor, eps: Iterable[float], *,
                     points: int = 201, tolerances: Iterable[float] = (1e-12, 1e-6), rtol: float = 1e-9) -> LightAtom:
    """Our proposition on copies moving apart: a mass ``ε`` at ``z`` in the disc of radius ``max_k |y_k|`` pushes
    the weighted norm of ``μ = Σ_k w_k δ_(y_k)`` towards ``||V Cov_μ(z) A||_2`` as ``ε -> 0``.

    ``Y`` is ``(1, K, 2)``; the disc is sampled on a ``points x points`` grid. Every grid point within ``rtol`` of
    the largest own-query norm is a maximiser (the maximum is not unique in general, so none is picked);
    ``counts`` gives how many lie within each of ``tolerances``."""
    check_tokens(Y)
    if Y.shape[0] != 1 or Y.shape[-1] != 2:
        raise ValueError(f"Y must be one measure in the plane, shape (1, K, 2); got {tuple(Y.shape)}")
    points = check_positive_int(points, "points", 3)
    Y, w = Y.double(), torch.as_tensor(w, dtype=torch.float64)
    eps_t = torch.as_tensor(list(eps), dtype=torch.float64)
    if not len(eps_t) or bool(((eps_t <= 0) | (eps_t >= 1)).any()):
        raise ValueError(f"eps must be a non-empty list of masses in (0, 1); got {eps_t.tolist()}")
    R = Y[0].norm(dim=1).max()
    line = torch.linspace(-1, 1, points, dtype=torch.float64)
    grid = torch.cartesian_prod(line, line) * R
    grid = grid[grid.norm(dim=1) <= R]
    values = own_query_norms(Y, A, V, weights=w, queries=grid.unsqueeze(0))[0]
    top = values.max()
    counts = {float(tol): int((values >= top * (1 - tol)).sum()) for tol in tolerances}
    Z = grid[values >= top * (1 - rtol)]
    K, m, e = Y.shape[1], len(Z), len(eps_t)
    atoms = torch.cat([Y.expand(m, K, 2), Z.unsqueeze(1)], 1).repeat_interleave(e, 0)
    weights = torch.cat([(1 - eps_t)[:, None] * w, eps_t[:, None]], 1).repeat(m, 1)
    lip = weighted_attention_lipschitz(atoms, A, V, weights).view(m, e)
    return LightAtom(grid, values, top.item(), Z, counts, eps_t, lip)


def mean_field_bound_sweep(A: torch.Tensor, V: torch.Tensor, radii: Iterable[float], lengths: Iterable[int], *,
                           per_length: int = 4) -> ResultTable:
    """Theorem 3.5 and our sharpening, against the exact ``Lip_X(f)`` (dense float64) on ``B_R^n``.

    For each radius and length: ``per_length`` inputs uniform in the ball (``inputs = "random"``) and Lemma C.7's
    input (``"adversarial"``); per row ``lip``, ``stated`` (Theorem 3.5) and ``sharpened``. A cached table."""
    grid = ball_grid(A, V, radii, lengths, per_length)
    A, V, lengths, per_length = grid.A, grid.V, grid.lengths, grid.per_length

    def compute() -> dict[str, list]:
        rows: dict[str, list] = {"R": [], "n": [], "inputs": [], "lip": [], "stated": [], "sharpened": []}
        f = lambda Z: self_attention(Z, A, V)  # noqa: E731
        for R in progress(grid.radii, desc="mean-field bound"):
            for n in lengths:
                X = torch.cat([ball_tokens(per_length, n, A.shape[0], R, seed=n), lemma_c_7_input(A, R, n)])
                rows["R"] += [R] * len(X)
                rows["n"] += [n] * len(X)
                rows["inputs"] += ["random"] * per_length + ["adversarial"]
                rows["lip"] += exact_local_lipschitz(f, X).tolist()
                rows["stated"] += [theorem_3_5(A, V, R).item()] * len(X)
                rows["sharpened"] += [theorem_3_5_sharpened(A, V, R).item()] * len(X)
        return rows

    return cached_table("mean_field_bound_sweep", grid.params, compute)


def two_dirac_sweep(A: torch.Tensor, gamma_R2: Iterable[float]) -> ResultTable:
    """Proposition C.8 (``V = I``): the weighted norm of the two-Dirac measure at each ``γR²``, in both cases.

    Per row: ``case`` (``"positive"``, ``γ = λ_1/8``; ``"negative"``, ``γ = -λ_d``), ``gamma``, ``gR2``, ``R``,
    ``lip`` (light mass ``p = e^{-2γR²}``), ``lip_third`` (light mass ``p/3``), ``closed`` (our closed form
    ``(1 + γR²) e^{γR²} / 2``) and ``rate`` (the stated ``(γ/2) R² e^{γR²}``). A cached table."""
    A = A.double()
    g_R2 = torch.as_tensor(list(gamma_R2), dtype=torch.float64)
    if not len(g_R2) or bool((g_R2 <= 0).any()):
        raise ValueError(f"gamma_R2 must be a non-empty list of positive values; got {g_R2.tolist()}")
    params = {"A": A.tolist(), "gamma_R2": g_R2.tolist()}

    def compute() -> dict[str, list]:
        values = real_eigenpairs(A)[0]
        cases = {"positive": values[0].item() / 8, "negative": -values[-1].item()}
        eye = torch.eye(A.shape[0], dtype=torch.float64)
        rows: dict[str, list] = {key: [] for key in ("case", "gamma", "gR2", "R", "lip", "lip_third", "closed",
                                                      "rate")}
        for case, g in cases.items():
            if g <= 0:
                continue
            R = (g_R2 / g).sqrt()
            X, w = proposition_3_6_measure(A, R, case=case)
            third = torch.stack([w[:, 0] / 3, 1 - w[:, 0] / 3], 1)
            rows["case"] += [case] * len(R)
            rows["gamma"] += [g] * len(R)
            rows["gR2"] += g_R2.tolist()
            rows["R"] += R.tolist()
            rows["lip"] += weighted_attention_lipschitz(X, A, eye, w).tolist()
            rows["lip_third"] += weighted_attention_lipschitz(X, A, eye, third).tolist()
            rows["closed"] += two_dirac_constant(g, R).tolist()
            rows["rate"] += (g / 2 * R**2 * torch.exp(g * R**2)).tolist()
        return rows

    return cached_table("two_dirac_sweep", params, compute)


def two_dirac_finite_n(A: torch.Tensor, ns: Iterable[int], *, estimate_up_to: int = 513) -> ResultTable:
    """Proposition 3.6 for sequences (``V = I``): at ``n - 1 = e^{2γR²}``, Lemma C.7's input of ``n`` tokens.

    Per row: ``n``, ``R``, ``exact`` (the two-Dirac formula, :func:`lemma_c_7_constants`), ``lower`` (the bound
    ``(1 + γR²) e^{γR²} / 2``) and ``estimate`` (:func:`~lipnb.local_lipschitz` on the sequence itself, to a
    tolerance of ``1e-6``, for ``n <= estimate_up_to``; NaN above). A cached table."""
    A, ns = A.double(), check_lengths(ns, "ns", minimum=3)
    estimate_up_to = check_positive_int(estimate_up_to, "estimate_up_to")
    params = {"A": A.tolist(), "ns": ns, "estimate_up_to": estimate_up_to}

    def compute() -> dict[str, list]:
        g = gamma(A).item()
        if g <= 0:
            raise ValueError(f"A has γ = {g:.3g} <= 0: Proposition 3.6 needs γ > 0")
        eye = torch.eye(A.shape[0], dtype=torch.float64)
        f = lambda Z: self_attention(Z, A, eye)  # noqa: E731
        rows: dict[str, list] = {"n": [], "R": [], "exact": [], "lower": [], "estimate": []}
        for n in progress(ns, desc="two Diracs, finite n"):
            R = math.sqrt(math.log(n - 1) / (2 * g))
            rows["n"].append(n)
            rows["R"].append(R)
            rows["exact"].append(lemma_c_7_constants(A, R, [n])[0].item())
            rows["lower"].append(two_dirac_constant(g, R).item())
            estimate = local_lipschitz(f, lemma_c_7_input(A, R, n), tol=1e-6)[0].item() if n <= estimate_up_to \
                else math.nan
            rows["estimate"].append(estimate)
        return rows

    return cached_table("two_dirac_finite_n", params, compute)
