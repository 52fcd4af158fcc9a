"""Synthetic inputs through one head (Part I): Theorem 3.3 against measurement, Lemma C.7, Theorem 3.7, App. C.7."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..arguments import (
    as_radius,
    check_bool,
    check_choice,
    check_lengths,
    check_matrix,
    check_positive_int,
    check_tokens,
)
from ..core.attention import attention_matrix, self_attention
from ..core.bounds import theorem_3_3, theorem_c_3
from ..core.dense import jacobian_matrix
from ..core.inputs import ball_tokens, lemma_c_7_input, quadratic_growth_input, random_head
from ..core.jacobian import selection_jacobian
from ..core.lipschitz import local_lipschitz
from ..core.measures import repeated_token_lipschitz
from ..results import ResultTable, cached_table, code_version, progress
from .stats import fit_line

__all__ = [
    "BallGrid",
    "ball_grid",
    "large_radius_sweep",
    "lemma_c_7_constants",
    "quadratic_growth_slopes",
    "radius_grid",
    "synthetic_bound_sweep",
]


def large_radius_sweep(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> ResultTable:
    """Theorem 3.7: ``error = ||D_{RX} f - S||_2`` and ``lip = ||D_{RX} f||_2`` at each ``radius`` ``R``, for one
    sequence ``X`` ``(1, n, d)``; one row per radius.

    Dense float64 Jacobians; ``S`` is :func:`selection_jacobian` at ``X`` (the argmax does not depend on ``R > 0``).
    Not cached (its inputs are tensors); the provenance records the shape, ``masked`` and lipnb's source hash.
    """

    check_tokens(X)
    if X.shape[0] != 1:
        raise ValueError(f"X must hold one sequence, shape (1, n, d); got shape {tuple(X.shape)}")
    masked = check_bool(masked, "masked")
    X, A, V = X.double(), A.double(), V.double()
    R = radius_grid(radii, "radii").reshape(-1, 1, 1)
    J = jacobian_matrix(lambda Z: self_attention(Z, A, V, masked=masked), R * X)
    S = selection_jacobian(X, A, V, masked=masked)
    columns = {"radius": R.flatten(), "error": torch.linalg.matrix_norm(J - S, ord=2),
               "lip": torch.linalg.matrix_norm(J, ord=2)}
    provenance = {"sweep": "large_radius_sweep", "shape": list(X.shape), "masked": masked,
                  "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)


def _large_radius_error(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> torch.Tensor:
    """Theorem 3.7: ``||D_{RX} f - S||_2`` for each radius ``R`` (see :func:`large_radius_sweep`), ``(len(radii),)``."""
    return large_radius_sweep(X, A, V, radii, masked=masked)["error"]


def quadratic_growth_slopes(n: int, d: int, radii: torch.Tensor, replicates: int, *, seed: int = 0) -> ResultTable:
    """App. C.7 / Kim et al. (2021): ``Lip_X(f)`` at :func:`~lipnb.core.inputs.quadratic_growth_input` at every radius.

    Each replicate draws its own ``A``, ``V`` (i.i.d. Gaussian, variance ``1/d``) and its own tokens; one row per
    ``replicate`` and ``radius``: the dense float64 constant ``lip`` and the replicate's log-log ``slope``. A cached
    table; ``table.pivot("lip", "replicate", "radius")`` gives the ``(replicates, radii)`` matrix.
    """

    n, d = check_positive_int(n, "n", 2), check_positive_int(d, "d")
    replicates, seed = check_positive_int(replicates, "replicates"), check_positive_int(seed, "seed", 0)
    radii = radius_grid(radii, "radii", positive=True)
    params = {"n": n, "d": d, "radii": radii.tolist(), "replicates": replicates, "seed": seed}

    def compute() -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        constants = []
        for r in progress(range(replicates), desc="quadratic growth"):
            A = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
            V = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
            X = quadratic_growth_input(radii, n, d, seed=seed * 100_003 + r)
            J = jacobian_matrix(lambda Z, A=A, V=V: self_attention(Z, A, V), X)
            constants.append(torch.linalg.matrix_norm(J, ord=2))
        slopes = torch.tensor([fit_line(radii.log(), c.log()).slope for c in constants], dtype=torch.float64)
        return {"replicate": torch.arange(replicates).repeat_interleave(len(radii)),
                "radius": radii.repeat(replicates), "lip": torch.stack(constants).flatten(),
                "slope": slopes.repeat_interleave(len(radii))}

    return cached_table("quadratic_growth_slopes", params, compute)


def lemma_c_7_constants(A: torch.Tensor, R: float, ns: Iterable[int], *, case: str = "auto") -> torch.Tensor:
    """Lemma C.7: the exact ``Lip_X(f)`` (``V = I``) at the lemma's input for each ``n``, through two Diracs.

    The input is two distinct tokens repeated ``1`` and ``n - 1`` times, so :func:`repeated_token_lipschitz`
    gives the exact constant at a cost independent of ``n``; returns ``(len(ns),)``, float64.
    """

    ns, R = check_lengths(ns, "ns", minimum=2), float(as_radius(R))
    check_choice(case, "case", ("auto", "positive", "negative"))
    A = A.double()
    Y = lemma_c_7_input(A, R, 2, case=case)
    eye = torch.eye(A.shape[0], dtype=torch.float64)
    return torch.cat([repeated_token_lipschitz(Y, A, eye, torch.tensor([1, n - 1])) for n in ns])


def synthetic_bound_sweep(d: int, seed: int, R: float, lengths: Iterable[int], per_length: int) -> ResultTable:
    """Theorem 3.3 vs measurement for ``A = random_head(d, seed)``, ``V = I`` on ``B_R^n``, for each ``n``.

    Two input families in column ``inputs``: ``"random"`` (``per_length`` sequences uniform in the ball) and
    ``"adversarial"`` (Lemma C.7's input, Sec. 5.2's case rule); per row ``n``, ``lip`` (Lanczos), ``bound``
    (Theorem 3.3), ``data_bound`` (Theorem C.3) and ``column_sum`` (largest ``Σ_i P_ij``). A cached table.
    """

    d, seed = check_positive_int(d, "d"), check_positive_int(seed, "seed", 0)
    R, lengths = float(as_radius(R)), check_lengths(lengths, minimum=2)
    per_length = check_positive_int(per_length, "per_length")
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


def radius_grid(values: torch.Tensor | Iterable[float], name: str, *, positive: bool = False) -> torch.Tensor:
    """A sweep's grid of radii, checked: a non-empty 1-D grid of finite radii ``>= 0`` (``> 0`` when ``positive``: a
    log is taken), float64; a string, a boolean tensor or a nested list is a ``TypeError``/``ValueError``."""
    if isinstance(values, str | bytes) or (isinstance(values, torch.Tensor) and values.dtype == torch.bool):
        raise TypeError(f"{name} must be a 1-D tensor or a list of numbers; got {type(values).__name__}")
    try:
        grid = torch.as_tensor(values if isinstance(values, torch.Tensor) else list(values), dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a 1-D tensor or a list of numbers; got {type(values).__name__}") from None
    if grid.dim() != 1 or not len(grid):
        raise ValueError(f"{name} must be a non-empty 1-D grid; got shape {tuple(grid.shape)}")
    as_radius(grid, name)
    if positive and bool((grid == 0).any()):
        raise ValueError(f"{name} must be > 0 (a log is taken); got {grid.tolist()}")
    return grid


@dataclass(frozen=True)
class BallGrid:
    """The grid of a sweep over the ball ``B_R^n`` (Theorems 3.3 to 4.3): a head ``(A, V)`` in float64, the radii,
    the lengths and the random inputs drawn per length."""

    A: torch.Tensor
    V: torch.Tensor
    radii: list[float]
    lengths: list[int]
    per_length: int

    @property
    def params(self) -> dict[str, object]:
        """The grid as the parameters of a cached table's key."""
        return {"A": self.A.tolist(), "V": self.V.tolist(), "radii": self.radii, "lengths": self.lengths,
                "per_length": self.per_length}


def ball_grid(A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor | Iterable[float], lengths: Iterable[int],
              per_length: int) -> BallGrid:
    """A checked :class:`BallGrid`: square ``A`` and ``V`` of one width, radii ``>= 0``, lengths ``>= 2``."""
    for M, name in ((A, "A"), (V, "V")):
        check_matrix(M, name, 2)
        if M.shape[0] != M.shape[1] or M.shape[0] != A.shape[0]:
            raise ValueError(f"A and V must be square matrices of one width; got {name} of shape {tuple(M.shape)} "
                             f"with A of shape {tuple(A.shape)}")
    return BallGrid(A.double(), V.double(), radius_grid(radii, "radii").tolist(), check_lengths(lengths, minimum=2),
                    check_positive_int(per_length, "per_length"))
