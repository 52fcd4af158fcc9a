"""The growth in ``n`` of the local constant at Lemma C.7's input on random heads (Lemma C.7, Proposition 3.4;
chapters *Theorem 3.3's √n is attained* and *Where the √n growth holds, and where it stops*): exact constants
against both lower bounds, the fitted exponent with the largest argmax count, and the window
``n - 1 <= e^{2γR²}`` where the growth is ``√n``. Every table is cached."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from ..arguments import as_radius, check_lengths, check_positive_int, check_sequence
from ..core.attention import self_attention
from ..core.bounds import argmax_counts, gamma, lemma_c_7, lemma_c_7_sharpened, proposition_3_4
from ..core.dense import exact_local_lipschitz
from ..core.inputs import adversarial_case, lemma_c_7_input, random_head, real_eigenpairs
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress
from .synthetic import lemma_c_7_constants

__all__ = ["lemma_c_7_table", "sqrt_n_growth_table", "sqrt_n_window_table"]

F64 = torch.float64


def _positive_floats(values: Iterable[float], name: str) -> list[float]:
    grid = [float(as_radius(v, f"each of {name}")) for v in check_sequence(values, name)]
    if any(v == 0 for v in grid):
        raise ValueError(f"{name} must be > 0; got {grid}")
    return grid


def lemma_c_7_table(dims: Sequence[int], radii: Iterable[float], lengths: Iterable[int]) -> ResultTable:
    """Lemma C.7 and Proposition 3.4 on the random heads ``A = random_head(d, seed=d)`` for ``d`` in ``dims``
    (``V = I``), in both cases of the lemma where ``A`` has real eigenvalues of both signs, at every radius and length.

    One row per ``d``, ``case`` (``"positive"``: the largest eigenvalue, ``"negative"``: the smallest), ``R`` and
    ``n``: ``exact`` (the dense float64 local constant at the lemma's input), ``lower`` (Lemma C.7's bound),
    ``sharp`` (the bound its proof gives, ``√(n-1) p (1 + κ(1-p))``), ``formula`` (the two-Dirac value,
    :func:`~lipnb.experiments.synthetic.lemma_c_7_constants`), ``chosen`` (1 in the case Sec. 5.2's rule picks) and
    ``prop`` (Proposition 3.4's bound, for every row). A cached table.
    """
    dims = check_lengths(dims, "dims")
    radii, lengths = _positive_floats(radii, "radii"), check_lengths(lengths, minimum=2)
    params = {"dims": dims, "radii": radii, "lengths": lengths}

    def compute() -> dict[str, list]:
        rows: dict[str, list] = {k: [] for k in ("d", "case", "R", "n", "exact", "lower", "sharp", "formula",
                                                 "chosen", "prop")}
        R = torch.tensor(radii, dtype=F64)
        for d in progress(dims, desc="Lemma C.7"):
            A = random_head(d, seed=d)
            values, _ = real_eigenpairs(A)
            chosen = adversarial_case(A)
            f = lambda Z, A=A, d=d: self_attention(Z, A, torch.eye(d, dtype=F64))  # noqa: E731
            for case, lam in (("positive", values[0]), ("negative", values[-1])):
                if (lam > 0) != (case == "positive"):
                    continue
                for n in lengths:
                    rows["exact"] += exact_local_lipschitz(f, lemma_c_7_input(A, R, n, case=case)).tolist()
                    rows["lower"] += lemma_c_7(lam, R, n).tolist()
                    rows["sharp"] += lemma_c_7_sharpened(lam, R, n).tolist()
                    rows["formula"] += [lemma_c_7_constants(A, r, [n], case=case).item() for r in radii]
                    rows["prop"] += proposition_3_4(A, R, n).tolist()
                    rows["d"] += [d] * len(radii)
                    rows["case"] += [case] * len(radii)
                    rows["R"] += radii
                    rows["n"] += [n] * len(radii)
                    rows["chosen"] += [int(case == chosen)] * len(radii)
        return rows

    return cached_table("lemma_c_7_table", params, compute)


def sqrt_n_growth_table(seeds: Sequence[int], lengths: Iterable[int], two_gamma_r2: float = 20.0) -> ResultTable:
    """Proposition 3.4's ``√n`` growth on the random heads ``random_head(4 + s, seed=10 + s)`` for ``s`` in
    ``seeds``, each at the radius where ``2γR² = two_gamma_r2``, at the input of Sec. 5.2's case.

    One row per ``head`` (the seed) and ``n``: ``case``, ``lip`` (the exact two-Dirac constant), ``count`` (the
    largest argmax count ``m_n`` of Theorem 3.7 at that input) and ``measured`` (the estimator's value on the full
    ``n``-token input at the largest ``n``, relative residual ``1e-6``; NaN at the other lengths). A cached table.
    """
    seeds = check_lengths(seeds, "seeds", minimum=0)
    lengths = check_lengths(lengths, minimum=2)
    target = float(as_radius(two_gamma_r2, "two_gamma_r2"))
    params = {"seeds": seeds, "lengths": lengths, "two_gamma_r2": target}

    def compute() -> dict[str, list]:
        rows: dict[str, list] = {k: [] for k in ("head", "case", "n", "lip", "count", "measured")}
        for seed in progress(seeds, desc="sqrt n growth"):
            A = random_head(4 + seed, seed=10 + seed)
            R = math.sqrt(target / (2 * gamma(A).item()))
            X = lemma_c_7_input(A, R, max(lengths))
            measured = local_lipschitz(lambda Z, A=A: self_attention(Z, A, torch.eye(A.shape[0], dtype=F64)), X,
                                       tol=1e-6).item()
            rows["head"] += [seed] * len(lengths)
            rows["case"] += [adversarial_case(A)] * len(lengths)
            rows["n"] += lengths
            rows["lip"] += lemma_c_7_constants(A, R, lengths).tolist()
            rows["count"] += [argmax_counts(X[:, :n], A).amax().item() for n in lengths]
            rows["measured"] += [measured if n == max(lengths) else math.nan for n in lengths]
        return rows

    return cached_table("sqrt_n_growth_table", params, compute)


def sqrt_n_window_table(d: int, seed: int, targets: Iterable[float], probes: Iterable[int], *,
                        points: int = 31, decades: float = 3.0) -> ResultTable:
    """Where the ``√n`` growth stops: for ``A = random_head(d, seed)`` at each radius with ``2γR² = t`` (``t`` in
    ``targets``), the exact constant at Lemma C.7's input for ``n`` from ``2`` to ``10^decades e^t`` (``points``
    lengths spaced evenly in ``log n`` around ``e^t``, plus ``2`` and ``3``).

    One row per ``t`` and ``n``: ``lip`` (two-Dirac), ``lower`` (Proposition 3.4) and ``measured`` (the estimator on
    the full ``n``-token input, relative residual ``1e-6``, at the ``probes`` lengths; NaN elsewhere; every probe is
    a row). A cached table.
    """
    d, seed = check_positive_int(d, "d"), check_positive_int(seed, "seed", 0)
    targets, probes = _positive_floats(targets, "targets"), check_lengths(probes, "probes", minimum=2)
    points = check_positive_int(points, "points", 2)
    decades = float(as_radius(decades, "decades"))
    params = {"d": d, "seed": seed, "targets": targets, "probes": probes, "points": points, "decades": decades}

    def compute() -> dict[str, list]:
        A = random_head(d, seed=seed)
        g = gamma(A).item()
        f = lambda Z: self_attention(Z, A, torch.eye(d, dtype=F64))  # noqa: E731
        rows: dict[str, list] = {k: [] for k in ("t", "n", "lip", "lower", "measured")}
        for t in progress(targets, desc="sqrt n window"):
            R = math.sqrt(t / (2 * g))
            grid = torch.logspace(-decades, decades, points, dtype=F64).tolist()
            ns = sorted({max(2, round(x * math.exp(t))) for x in grid} | {2, 3} | set(probes))
            measured = {m: local_lipschitz(f, lemma_c_7_input(A, R, m), tol=1e-6).item() for m in probes}
            rows["t"] += [t] * len(ns)
            rows["n"] += ns
            rows["lip"] += lemma_c_7_constants(A, R, ns).tolist()
            rows["lower"] += proposition_3_4(A, R, torch.tensor(ns, dtype=F64)).tolist()
            rows["measured"] += [measured.get(m, math.nan) for m in ns]
        return rows

    return cached_table("sqrt_n_window_table", params, compute)
