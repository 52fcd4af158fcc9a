"""What a float32 run of :func:`lipnb.local_lipschitz` certifies, against dense float64 truth, on the family where
float32's own products are least to be trusted (chapter *Certifying a float32 run*): one self-attention head with
float32 weights at float32 tokens of norm 10 to 100, where the softmax saturates.

Each problem runs twice: as written (a map closing over float32 weights, differentiated by automatic
differentiation: its float64 evaluation is made by promotion, the weights cast to float64), and wrapped as a map
that refuses float64 (no float64 evaluation: the float32 certificate and its premise on float32's rounding). The
truth is the dense float64 Jacobian of the same map, its float32 weights cast, at the same float32 inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..core.attention import self_attention
from ..core.dense import jacobian_matrix
from ..core.linearization import Linearization, linearize
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress

__all__ = ["Float32Only", "float32_saturated_audit", "saturated_head"]

Map = Callable[[Tensor], Tensor]
PATHS = ("promoted", "float32 only")


class Float32Only:
    """A map that computes in float32 only: its call and its linearization refuse any other dtype, so it has no
    float64 evaluation (as a closed form written for float32 would)."""

    def __init__(self, fn: Map) -> None:
        self.fn = fn

    def _check(self, Z: Tensor) -> None:
        if Z.dtype != torch.float32:
            raise TypeError("this map runs in float32 only")

    def __call__(self, Z: Tensor) -> Tensor:
        self._check(Z)
        return self.fn(Z)

    def linearize(self, Z: Tensor) -> Linearization:
        self._check(Z)
        return linearize(self.fn, Z)


def saturated_head(scale: float, seed: int, *, inputs: int = 4, n: int = 6, d: int = 4) -> tuple[Map, Map, Tensor]:
    """One head ``X -> softmax(X A Xᵀ) X V`` with float32 ``A``, ``V`` (entries of standard deviation 1/2) and
    ``inputs`` float32 inputs of ``n`` tokens of norm ``scale``: the map, its float64 truth (the same weights cast
    to float64) and the inputs."""
    g = torch.Generator().manual_seed(seed)
    A, V = torch.randn(d, d, generator=g) / 2, torch.randn(d, d, generator=g) / 2
    X = torch.randn(inputs, n, d, generator=g)
    X = scale * X / X.norm(dim=-1, keepdim=True)
    return (lambda Z: self_attention(Z, A, V)), (lambda Z: self_attention(Z, A.double(), V.double())), X


def float32_saturated_audit(scales: tuple[float, ...] = (10.0, 20.0, 30.0, 50.0, 100.0), seeds: int = 8) -> ResultTable:
    """Every input of :func:`saturated_head` at each scale and seed ``0 .. seeds - 1``, by both paths (``path``:
    ``"promoted"`` or ``"float32 only"``): the default call's ``value``, ``error`` and ``converged``, the dense
    float64 norm ``sigma1``, and the relative distance ``nearest`` from the value to the nearest singular value of
    the float64 truth (cached)."""
    params = {"scales": list(scales), "seeds": seeds}

    def compute() -> dict[str, list]:
        columns: dict[str, list] = {name: [] for name in ("path", "scale", "seed", "input", "value", "error",
                                                           "converged", "sigma1", "nearest")}
        grid = [(scale, seed) for scale in scales for seed in range(seeds)]
        for scale, seed in progress(grid, "float32 audit", len(grid)):
            fn, truth, X = saturated_head(scale, seed)
            sv = torch.linalg.svdvals(jacobian_matrix(truth, X.double()))
            for path in PATHS:
                res = local_lipschitz(fn if path == "promoted" else Float32Only(fn), X, detailed=True)
                value = res.value.double()
                nearest = ((sv - value.unsqueeze(1)).abs() / value.unsqueeze(1)).min(1).values
                for b in range(len(X)):
                    row = (path, scale, seed, b, float(value[b]), float(res.error[b]), bool(res.converged[b]),
                           float(sv[b, 0]), float(nearest[b]))
                    for name, entry in zip(columns, row, strict=True):
                        columns[name].append(entry)
        return columns

    return cached_table("float32_saturated_audit", params, compute)
