"""The proof of Theorem 3.3 step by step, and the data-dependent bound it leaves at a given input (chapter *The √n
upper bound*): each term of Lemma C.2 as a dense matrix beside the step of the proof that bounds it, and the local
constant beside Theorem C.3 (this book's variant), unmasked, masked and with a score bias."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from ..arguments import as_radius, check_tokens
from ..core.attention import MultiHead, multihead_attention, self_attention
from ..core.bounds import theorem_c_3, theorem_c_3_terms
from ..core.dense import exact_local_lipschitz, jacobian_matrix
from ..core.jacobian import lemma_c_2_term_matrices
from ..results import ResultTable, code_version

__all__ = ["data_bound_table", "proof_steps"]


def _families(inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
    if not isinstance(inputs, Mapping) or not inputs:
        raise TypeError("inputs must be a non-empty mapping of family names to (B, n, d) tensors")
    for name, X in inputs.items():
        check_tokens(X, f"inputs[{name!r}]")
    return {str(name): X.double() for name, X in inputs.items()}


def proof_steps(inputs: Mapping[str, Tensor], A: Tensor, R: float) -> ResultTable:
    """Theorem 3.3's proof (``V = I``) at every input of every family, term by term.

    One row per family (``inputs``), ``input`` and ``term`` (1, 2, 3 for ``T_1, T_2, T_3`` of Lemma C.2):
    ``exact`` (the dense spectral norm of the term), ``step`` (the proof's bound before the ball is used,
    :func:`~lipnb.core.bounds.theorem_c_3_terms`: equal to ``exact`` for terms 1 and 2), ``worst`` (the step's worst
    case on ``B_R^n``: ``√n``, ``||A||₂R²``, ``||A||₂R²√n``) and ``sum_error`` (the largest entry of
    ``T_1 + T_2 + T_3 - D_X f``, the same on the input's three rows). Not cached (its inputs are tensors).
    """
    families, R = _families(inputs), float(as_radius(R))
    A = A.double()
    norm_A = torch.linalg.matrix_norm(A, ord=2).item()
    eye = torch.eye(A.shape[0], dtype=torch.float64)
    columns: dict[str, list] = {k: [] for k in ("inputs", "input", "term", "exact", "step", "worst", "sum_error")}
    for name, X in families.items():
        B, n, _ = X.shape
        T = lemma_c_2_term_matrices(X, A)
        J = jacobian_matrix(lambda Z: self_attention(Z, A, eye), X)
        sum_error = (T.sum(1) - J).abs().flatten(1).amax(1)
        exact = torch.linalg.matrix_norm(T, ord=2)
        step = theorem_c_3_terms(X, A)
        worst = [math.sqrt(n), norm_A * R**2, norm_A * R**2 * math.sqrt(n)]
        for b in range(B):
            for k in range(3):
                columns["inputs"].append(name)
                columns["input"].append(b)
                columns["term"].append(k + 1)
                columns["exact"].append(exact[b, k].item())
                columns["step"].append(step[b, k].item())
                columns["worst"].append(worst[k])
                columns["sum_error"].append(sum_error[b].item())
    provenance = {"sweep": "proof_steps", "families": list(families), "R": R, "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)


def data_bound_table(inputs: Mapping[str, Tensor], A: Tensor, V: Tensor, score_bias: Tensor) -> ResultTable:
    """Theorem C.3 (this book's variant) against the dense local constant at every input of every family, for three
    maps: one head ``(A, V)`` (``map="unmasked"``), its masked version, and the head with a score bias ``c``.

    One row per family, ``input`` and ``map``: ``lip`` (dense float64) and ``data_bound``. Not cached.
    """
    families = _families(inputs)
    A, V, c = A.double(), V.double(), score_bias.double()
    biased = MultiHead(A=A[None], V=V[None], W=torch.eye(A.shape[0], V.shape[0], dtype=torch.float64)[None],
                       score_bias=c[None])
    columns: dict[str, list] = {k: [] for k in ("inputs", "input", "map", "lip", "data_bound")}
    for name, X in families.items():
        runs = {
            "unmasked": (exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X), theorem_c_3(X, A, V)),
            "masked": (exact_local_lipschitz(lambda Z: self_attention(Z, A, V, masked=True), X),
                       theorem_c_3(X, A, V, masked=True)),
            "score bias": (exact_local_lipschitz(lambda Z: multihead_attention(Z, biased), X),
                           theorem_c_3(X, A, V, score_bias=c)),
        }
        for kind, (lip, bound) in runs.items():
            columns["inputs"] += [name] * len(X)
            columns["input"] += list(range(len(X)))
            columns["map"] += [kind] * len(X)
            columns["lip"] += lip.tolist()
            columns["data_bound"] += bound.tolist()
    provenance = {"sweep": "data_bound_table", "families": list(families), "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)
