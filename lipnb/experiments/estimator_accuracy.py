"""The estimator against dense float64 truth on small maps (App. E.1, chapter *Self-attention and its Jacobian*):
each method's estimate beside the dense SVD with its products to convergence, and its error product by product."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from torch import Tensor

from ..arguments import check_choice, check_lengths, check_positive_int, check_sequence, check_tokens
from ..core.dense import exact_local_lipschitz
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, code_version, progress

__all__ = ["estimator_agreement", "estimator_convergence"]

# The two Krylov methods of ``local_lipschitz``: Lanczos (the default) and the paper's power iteration (App. E.1).
_METHODS = ("lanczos", "power")

Map = Callable[[Tensor], Tensor]


def _methods(methods: Sequence[str]) -> list[str]:
    chosen = [check_choice(m, "each of methods", _METHODS) for m in check_sequence(methods, "methods")]
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"methods must be distinct; got {chosen}")
    return chosen


def estimator_agreement(maps: Mapping[str, Map], X: Tensor, *, methods: Sequence[str] = _METHODS,
                        max_iter: int = 3000) -> ResultTable:
    """App. E.1: each method's ``Lip_X`` beside the dense float64 SVD's, for every map and every input of ``X``.

    One row per ``map``, ``method`` and ``input`` (the index in ``X``): ``value`` (the estimate at the default
    stopping test), ``exact`` (:func:`~lipnb.core.dense.exact_local_lipschitz`), ``iterations`` (products with
    ``JᵀJ``) and ``converged`` (1 or 0). Not cached (its inputs are maps); the provenance records the shape.
    """
    if not isinstance(maps, Mapping) or not maps:
        raise TypeError("maps must be a non-empty mapping of names to maps")
    check_tokens(X)
    chosen, max_iter = _methods(methods), check_positive_int(max_iter, "max_iter")
    columns: dict[str, list] = {"map": [], "method": [], "input": [], "value": [], "exact": [], "iterations": [],
                                "converged": []}
    for name, fn in progress(list(maps.items()), desc="estimator agreement"):
        exact = exact_local_lipschitz(fn, X)
        for method in chosen:
            r = local_lipschitz(fn, X, method=method, max_iter=max_iter, detailed=True)
            columns["map"] += [str(name)] * len(X)
            columns["method"] += [method] * len(X)
            columns["input"] += list(range(len(X)))
            columns["value"] += r.value.double().tolist()
            columns["exact"] += exact.tolist()
            columns["iterations"] += r.iterations.tolist()
            columns["converged"] += r.converged.long().tolist()
    provenance = {"sweep": "estimator_agreement", "shape": list(X.shape), "methods": chosen, "max_iter": max_iter,
                  "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)


def estimator_convergence(fn: Map, X: Tensor, steps: Iterable[int], *,
                          methods: Sequence[str] = _METHODS) -> ResultTable:
    """App. E.1: the relative error against the dense SVD of each method stopped after ``k`` products with ``JᵀJ``,
    for every ``k`` in ``steps``, at the one input ``X`` ``(1, n, d)``.

    One row per ``method`` and ``products``: ``error = max(|estimate - exact| / exact, 1e-16)`` (floored so that a
    log scale can show it). Each run asks for a tolerance no run reaches, so it stops at its cap. Not cached.
    """
    check_tokens(X)
    if X.shape[0] != 1:
        raise ValueError(f"X must hold one input, shape (1, n, d); got shape {tuple(X.shape)}")
    steps, chosen = check_lengths(steps, "steps"), _methods(methods)
    exact = exact_local_lipschitz(fn, X).item()
    columns: dict[str, list] = {"method": [], "products": [], "error": []}
    for method in progress(chosen, desc="estimator convergence"):
        for k in steps:
            value = local_lipschitz(fn, X, method=method, max_iter=k, tol=1e-14, detailed=True).value.item()
            columns["method"].append(method)
            columns["products"].append(k)
            columns["error"].append(max(abs(value - exact) / exact, 1e-16))
    provenance = {"sweep": "estimator_convergence", "shape": list(X.shape), "steps": steps, "methods": chosen,
                  "exact": exact, "code": code_version(__name__)}
    return ResultTable.from_columns(columns, provenance)
