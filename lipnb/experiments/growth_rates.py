"""Where Castin et al. (2024) and Kim et al. (2021) meet: their growth rates measured side by side (chapter 34).

Each row of :func:`rates_table` is one statement: how a local Lipschitz constant grows with the radius
``R`` or the length ``n``/``N``, the rate the paper states, the log-log exponent of the paper's bound (or
claim) over the measured range, and the exponent of what inputs actually reach.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..core.attention import self_attention
from ..core.bounds import theorem_3_3
from ..core.dense import exact_local_lipschitz
from ..core.inputs import argmax_configuration, lemma_c_7_input, quadratic_growth_input
from ..results import ResultTable, cached_table
from .l2_tightness import fitted_rates, tightness_sweep
from .stats import fit_line

__all__ = ["rates_table"]


def _exponent(x: Tensor, y: Tensor) -> float:
    return fit_line(x.double().log(), y.double().log()).slope


def rates_table(*, radii: tuple[float, ...] = (4.0, 8.0, 16.0, 32.0), lengths: tuple[int, ...] = (2, 4, 8, 16, 32),
                R_lengths: float = 6.0) -> ResultTable:
    """Dot-product attention (``A = V = I/√2`` on ``R²``) and L2 attention (:func:`~.l2_tightness.identity_head`).

    Columns ``result, paper, map, variable, stated, claim_exponent, measured_exponent``. Radius rows: the
    App. C.7 input (Kim's Theorem 3.1 / Castin's App. C.7; claim ``R²``) and a generic input off Theorem
    3.7's null set (claim: bounded). Length rows at radius ``R_lengths``: Theorem 3.3's bound against Lemma
    C.7's input (``√n``), and Theorem 3.2's two bounds against :func:`lipnb.experiments.l2_tightness.tightness_sweep`
    (its default lengths, so that chapter 32's cached table is reused).
    """
    A = torch.eye(2, dtype=torch.float64) / math.sqrt(2)

    def f(X: Tensor) -> Tensor:
        return self_attention(X, A, A)

    def compute() -> dict[str, list]:
        cols: dict[str, list] = {k: [] for k in ("result", "paper", "map", "variable", "stated", "claim_exponent",
                                                 "measured_exponent")}

        def add(*row: object) -> None:
            for key, value in zip(cols, row, strict=True):
                cols[key].append(value)

        R = torch.tensor(radii, dtype=torch.float64)
        null = exact_local_lipschitz(f, quadratic_growth_input(R, 6, 2))
        add("Theorem 3.1 / App. C.7 (null set)", "Kim et al. (2021) / Castin et al. (2024)", "dot", "R", "R^2", 2.0,
            _exponent(R, null))
        generic = argmax_configuration(A, R, 6)
        add("Theorem 3.7 (off the null set)", "Castin et al. (2024)", "dot", "R", "bounded", 0.0,
            _exponent(R, exact_local_lipschitz(f, generic)))
        n = torch.tensor(lengths, dtype=torch.float64)
        bound = torch.stack([theorem_3_3(A, A, R_lengths, int(k)) for k in lengths])
        reached = torch.cat([exact_local_lipschitz(f, lemma_c_7_input(A, R_lengths, int(k))) for k in lengths])
        add("Theorem 3.3 on B_R^n vs Lemma C.7", "Castin et al. (2024)", "dot", "n", "sqrt(n)", _exponent(n, bound),
            _exponent(n, reached))
        for row in fitted_rates(tightness_sweep()).frame.itertuples():
            stated = "log N - log log N" if row.norm == "inf-norm" else "sqrt(N) log N"
            add(f"Theorem 3.2 ({row.norm})", "Kim et al. (2021)", "L2", "N", stated, row.bound_exponent,
                row.power_exponent)
        return cols

    return cached_table("two_papers_rates", {"radii": list(radii), "lengths": list(lengths),
                                             "R_lengths": R_lengths}, compute)
