"""Attention as a flow, measured (the residual stack of the authors' slides, part IV): the stack's convergence to
the flow as the depth grows, the rescaled tokens and their clusters, and the separation of nearby inputs against
Grönwall products of measured local constants."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from ..arguments import as_real, check_lengths, check_positive_int, check_tokens
from ..core.attention import self_attention
from ..core.bounds import flow_gronwall_log
from ..core.flow import attention_flow, attention_flow_rk4, cluster_labels
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress

__all__ = [
    "cluster_centres",
    "cluster_counts",
    "rescaled_tokens",
    "separation_pairs",
    "stack_convergence",
    "stack_log_norms",
]


def stack_convergence(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, depths: Iterable[int], *,
                      reference_steps: int = 2000) -> ResultTable:
    """Euler's order one for the stack: ``||X^L - X(T)|| / ||X(T)||`` at each depth ``L``, against classical
    Runge–Kutta with ``reference_steps`` steps; ``rk4_self_error`` compares that reference with half its steps.
    A cached table, one row per depth."""
    check_tokens(X0)
    depths = check_lengths(depths, "depths")
    T, steps = float(as_real(T, "T")), check_positive_int(reference_steps, "reference_steps", 2)
    X0, A, V = X0.double(), A.double(), V.double()
    params = {"X0": X0.tolist(), "A": A.tolist(), "V": V.tolist(), "T": T, "depths": depths,
              "reference_steps": steps}

    def compute() -> dict[str, list]:
        reference = attention_flow_rk4(X0, A, V, T, steps)
        half = attention_flow_rk4(X0, A, V, T, steps // 2)
        self_error = ((half - reference).norm() / reference.norm()).item()
        errors = [((attention_flow(X0, A, V, T, L)[-1] - reference).norm() / reference.norm()).item()
                  for L in progress(depths, desc="stack depths")]
        return {"depth": depths, "error": errors, "rk4_self_error": [self_error] * len(depths)}

    return cached_table("stack_convergence", params, compute)


def rescaled_tokens(trajectory: torch.Tensor, V: torch.Tensor, T: float) -> torch.Tensor:
    """``y_i(t_k) = e^{-t_k V} x_i^k`` for a trajectory ``(L + 1, n, d)`` of one sequence, ``t_k = k T / L``."""
    if trajectory.dim() != 3:
        raise ValueError(f"trajectory must be one sequence's layers, shape (L + 1, n, d); got "
                         f"{tuple(trajectory.shape)}")
    t = torch.linspace(0, float(as_real(T, "T")), len(trajectory), dtype=torch.float64)
    return torch.einsum("tde,tne->tnd", torch.linalg.matrix_exp(-t.view(-1, 1, 1) * V.double()),
                        trajectory.double())


def cluster_counts(Y: torch.Tensor, tol: float, layers: Iterable[int]) -> torch.Tensor:
    """The number of single-linkage clusters (points closer than ``tol``) of ``Y[k]`` at each layer ``k``."""
    return torch.tensor([int(cluster_labels(Y[k], tol).max()) + 1 for k in layers])


def cluster_centres(Y: torch.Tensor, tol: float) -> tuple[torch.Tensor, float]:
    """The centres of the single-linkage clusters of ``Y`` ``(n, d)`` at ``tol``, and the largest distance of a
    point to its cluster's centre."""
    labels = cluster_labels(Y, tol)
    centres = torch.stack([Y[labels == c].mean(0) for c in range(int(labels.max()) + 1)])
    spread = max((Y[labels == c] - centres[c]).norm(dim=-1).max().item() for c in range(len(centres)))
    return centres, spread


def stack_log_norms(jacobians: torch.Tensor, h: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The chain rule through the layers ``X -> X + h f(X)``: ``log ||Π_{j<k} (I + h D_{X^j} f)||_2`` for
    ``k = 0..L`` (``(L + 1,)``, the stack's local constant after ``k`` layers) and the whole product."""
    stack = torch.eye(jacobians.shape[-1], dtype=torch.float64)
    logs = [0.0]
    for J in jacobians:
        stack = stack + h * J @ stack
        logs.append(torch.linalg.matrix_norm(stack, ord=2).log().item())
    return torch.tensor(logs, dtype=torch.float64), stack


def separation_pairs(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, L: int,
                     pairs: Mapping[str, tuple[float, torch.Tensor]], layer_constants: torch.Tensor, *,
                     fine_points: int = 9, fine_from: float = 0.1) -> dict[str, dict[str, torch.Tensor | float]]:
    """Our Grönwall estimates for the stack: for each pair ``Y^0 = X^0 + δ U`` (``pairs``: name -> ``(δ, U)``),
    the separation ``log(||X^k - Y^k|| / δ)`` at every layer and the Grönwall product of measured segment
    constants ``λ_j`` (``log Π_{j<k} (1 + h λ_j)``).

    ``λ_j`` is the largest local constant (Lanczos to ``1e-10``) at the two ends of the segment between the
    layer-``j`` states (``layer_constants`` gives ``X^j``'s) and its midpoint; for ``δ >= fine_from`` at
    ``fine_points`` equally spaced points, and ``refinement`` says by how much that raised any ``λ_j``."""
    check_tokens(X0)
    L, fine_points = check_positive_int(L, "L"), check_positive_int(fine_points, "fine_points", 3)
    f = lambda Z: self_attention(Z, A, V)  # noqa: E731
    base = attention_flow(X0, A, V, T, L)
    out: dict[str, dict[str, torch.Tensor | float]] = {}
    for name, (delta, direction) in progress(list(pairs.items()), desc="pairs"):
        other = attention_flow(X0 + delta * direction, A, V, T, L)
        log_div = ((other - base).flatten(1).norm(dim=1) / delta).log()
        a, b = base[:-1, 0], other[:-1, 0]
        ends = local_lipschitz(f, torch.cat([b, (a + b) / 2]), tol=1e-10).view(2, L).amax(0)
        lam = torch.maximum(ends, layer_constants)
        refinement = 0.0
        if delta >= fine_from:
            s = torch.linspace(0, 1, fine_points, dtype=torch.float64)[1:-1].view(-1, 1, 1, 1)
            finer = (a + s * (b - a)).reshape(-1, *a.shape[1:])
            fine = torch.maximum(local_lipschitz(f, finer, tol=1e-10).view(-1, L).amax(0), lam)
            refinement, lam = (fine / lam - 1).max().item(), fine
        r0 = X0.norm(dim=-1).max().item()
        out[name] = {"log_div": log_div, "lam": lam, "refinement": refinement,
                     "log_measured": flow_gronwall_log(A, V, r0, X0.shape[1], T, L, step_constants=lam)}
    return out
