"""Masked attention measured (Sec. 4 and App. D of Castin et al.): Theorem 4.3 and the masked lower bound against
exact constants, the growth in ``n`` at the adversarial input, and masked mean-field attention on pairs of
measures, with the Cesàro operators that break the bound Theorem 4.4 states."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..arguments import check_lengths, check_positive_int
from ..core.attention import self_attention
from ..core.bounds import lemma_c_7, theorem_3_3, theorem_c_3
from ..core.dense import exact_local_lipschitz
from ..core.inputs import ball_tokens, lemma_c_7_input, real_eigenpairs
from ..core.lipschitz import local_lipschitz
from ..core.measures import masked_mean_field, masked_mean_field_ratio
from ..results import ResultTable, cached_table, progress
from .synthetic import ball_grid, radius_grid

__all__ = [
    "cesaro_matrix",
    "cesaro_norms",
    "cesaro_pair_ratios",
    "masked_chain_sweep",
    "masked_growth_sweep",
    "masked_mean_field_sweep",
]


def masked_chain_sweep(A: torch.Tensor, V: torch.Tensor, radii: Iterable[float], lengths: Iterable[int], *,
                       per_length: int = 3) -> ResultTable:
    """Theorem 4.3 and our masked lower bound: ``√(n-1) p <= Lip_X(f^m) <= Theorem C.3 at X <= Theorem 4.3``.

    For each radius, length and value matrix (``values = "I"`` or ``"V"``): ``per_length`` inputs uniform in the
    ball (``inputs = "random"``) and Lemma C.7's two inputs (``"positive"``, ``"negative"``). Per row the exact
    masked constant ``lip`` (dense float64), ``data_bound`` (Theorem C.3, masked), ``ball_bound`` (Theorem 3.3,
    which Theorem 4.3 states) and ``lower`` (Lemma C.7's bound, for ``V = I`` at its inputs; NaN elsewhere).
    A cached table."""
    grid = ball_grid(A, V, radii, lengths, per_length)
    A, V, lengths, per_length = grid.A, grid.V, grid.lengths, grid.per_length

    def compute() -> dict[str, list]:
        eigenvalues = real_eigenpairs(A)[0]
        lam = {"positive": eigenvalues[0], "negative": eigenvalues[-1]}
        eye = torch.eye(A.shape[0], dtype=torch.float64)
        rows: dict[str, list] = {key: [] for key in ("R", "n", "values", "inputs", "lip", "data_bound",
                                                      "ball_bound", "lower")}
        for R in progress(grid.radii, desc="masked chain"):
            for n in lengths:
                X = torch.cat([ball_tokens(per_length, n, A.shape[0], R, seed=n),
                               lemma_c_7_input(A, R, n, case="positive"), lemma_c_7_input(A, R, n, case="negative")])
                inputs = ["random"] * per_length + ["positive", "negative"]
                for name, W in (("I", eye), ("V", V)):
                    f = lambda Z, W=W: self_attention(Z, A, W, masked=True)  # noqa: E731
                    rows["R"] += [R] * len(X)
                    rows["n"] += [n] * len(X)
                    rows["values"] += [name] * len(X)
                    rows["inputs"] += inputs
                    rows["lip"] += exact_local_lipschitz(f, X).tolist()
                    rows["data_bound"] += theorem_c_3(X, A, W, masked=True).tolist()
                    rows["ball_bound"] += [theorem_3_3(A, W, R, n).item()] * len(X)
                    rows["lower"] += [float("nan")] * per_length + (
                        [lemma_c_7(lam[c], R, n).item() for c in ("positive", "negative")] if name == "I"
                        else [float("nan")] * 2)
        return rows

    return cached_table("masked_chain_sweep", grid.params, compute)


def masked_growth_sweep(A: torch.Tensor, radii: Iterable[float], lengths: Iterable[int], *,
                        per_length: int = 4) -> ResultTable:
    """Theorem 4.3 in ``n`` (``V = I``): the masked local constant at Lemma C.7's input (``inputs = "adversarial"``,
    its positive case, Lanczos to ``1e-6``) and the largest over ``per_length`` inputs uniform in ``B_R^n``
    (``"random"``), for each radius and length. A cached table."""
    radii_t = radius_grid(radii, "radii")
    lengths, per_length = check_lengths(lengths, minimum=2), check_positive_int(per_length, "per_length")
    A = A.double()
    params = {"A": A.tolist(), "radii": radii_t.tolist(), "lengths": lengths, "per_length": per_length}

    def compute() -> dict[str, list]:
        eye = torch.eye(A.shape[0], dtype=torch.float64)
        f = lambda Z: self_attention(Z, A, eye, masked=True)  # noqa: E731
        rows: dict[str, list] = {"R": [], "n": [], "inputs": [], "lip": []}
        for R in progress(radii_t.tolist(), desc="masked growth"):
            for n in lengths:
                adversarial = local_lipschitz(f, lemma_c_7_input(A, R, n, case="positive"), tol=1e-6)[0]
                random = local_lipschitz(f, ball_tokens(per_length, n, A.shape[0], R, seed=n)).max()
                rows["R"] += [R, R]
                rows["n"] += [n, n]
                rows["inputs"] += ["adversarial", "random"]
                rows["lip"] += [adversarial.item(), random.item()]
        return rows

    return cached_table("masked_growth_sweep", params, compute)


def cesaro_matrix(n: int) -> torch.Tensor:
    """The discrete Cesàro operator ``C_n`` (``(C_n)_{ij} = 1/i`` for ``j <= i``): masked attention at ``A = 0``."""
    n = check_positive_int(n, "n")
    return torch.tril(torch.ones(n, n, dtype=torch.float64)) / torch.arange(1, n + 1, dtype=torch.float64)[:, None]


def cesaro_norms(lengths: Iterable[int]) -> torch.Tensor:
    """``||C_n||_2`` for each ``n``: the Lipschitz constant of ``F^m`` on ``n`` positions at ``A = 0``, ``V = I``."""
    return torch.stack([torch.linalg.matrix_norm(cesaro_matrix(n), ord=2) for n in check_lengths(lengths)])


def cesaro_pair_ratios(A: torch.Tensor, V: torch.Tensor, lengths: Iterable[int], *, radius: float = 0.5,
                       step: float = 1e-4) -> torch.Tensor:
    """Theorem 4.4 as stated, broken: ``W_c(F^m(μ), F^m(ν)) / W_c(μ, ν)`` for the Cesàro pair of ``n`` atoms.

    ``μ`` holds ``n`` tokens uniform in the ball of ``radius`` at ``n`` positions; ``ν`` moves them by ``step``
    along ``u ⊗ v``, ``u`` the top right singular vector of ``C_n`` and ``v`` that of ``V``. At ``A = 0`` the map is
    linear and the ratio is ``||V||_2 ||C_n||_2``. One ratio per length, ``(len(lengths),)``."""
    lengths = check_lengths(lengths)
    A, V = A.double(), V.double()
    v = torch.linalg.svd(V).Vh[0]
    ratios = []
    for n in lengths:
        u = torch.linalg.svd(cesaro_matrix(n)).Vh[0]
        X0 = ball_tokens(1, n, A.shape[0], radius, seed=n)
        ratios.append(masked_mean_field_ratio(X0, X0 + step * u[:, None] * v, torch.arange(n), A, V))
    return torch.cat(ratios)


def masked_mean_field_sweep(A: torch.Tensor, V: torch.Tensor, radii: Iterable[float], *, positions: int = 6,
                            atoms: int = 4, measures: int = 8,
                            distances: Iterable[float] = (1e-3, 1e-2, 1e-1, 1.0)) -> ResultTable:
    """The corrected Theorem 4.4 on random pairs of measures: ``positions`` positions with ``atoms`` atoms each,
    in ``B_R``, and a second measure moving every atom by Gaussian noise of scale ``s R`` (projected back into
    ``B_R``) for each ``s`` of ``distances``.

    Per row (``kind = "random"``, one per measure and distance) the ratio of conditional Wasserstein distances;
    and per measure (``kind = "top"``) the ratio along the top singular vector of the block-masked atom map at a
    step ``1e-6 R``, with that map's local constant ``local`` (Lanczos to ``1e-10``). A cached table."""
    radii_t = radius_grid(radii, "radii")
    positions, atoms = check_positive_int(positions, "positions"), check_positive_int(atoms, "atoms")
    measures = check_positive_int(measures, "measures")
    scales = [float(s) for s in distances]
    A, V = A.double(), V.double()
    params = {"A": A.tolist(), "V": V.tolist(), "radii": radii_t.tolist(), "positions": positions, "atoms": atoms,
              "measures": measures, "distances": scales}

    def compute() -> dict[str, list]:
        pos = torch.arange(positions).repeat_interleave(atoms)
        F = lambda Z: masked_mean_field(Z, pos, A, V)  # noqa: E731
        rows: dict[str, list] = {"R": [], "kind": [], "measure": [], "distance": [], "ratio": [], "local": []}
        for R in progress(radii_t.tolist(), desc="masked mean field"):
            X = ball_tokens(measures, positions * atoms, A.shape[0], R, seed=int(100 * R))
            gen = torch.Generator().manual_seed(int(100 * R))
            for s in scales:
                moved = X + s * R * torch.randn(X.shape, generator=gen, dtype=X.dtype)
                moved = moved * (R / moved.norm(dim=-1, keepdim=True)).clamp(max=1.0)
                rows["ratio"] += masked_mean_field_ratio(X, moved, pos, A, V).tolist()
                rows["kind"] += ["random"] * measures
                rows["distance"] += [s] * measures
            top = local_lipschitz(F, X, tol=1e-10, detailed=True)
            rows["ratio"] += masked_mean_field_ratio(X, X + 1e-6 * R * top.right_vector, pos, A, V).tolist()
            rows["kind"] += ["top"] * measures
            rows["distance"] += [1e-6] * measures
            count = measures * (len(scales) + 1)
            rows["R"] += [R] * count
            rows["measure"] += list(range(measures)) * (len(scales) + 1)
            rows["local"] += [float("nan")] * measures * len(scales) + top.value.tolist()
        return rows

    return cached_table("masked_mean_field_sweep", params, compute)
