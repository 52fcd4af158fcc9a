"""Starting vectors of :func:`lipnb.local_lipschitz`: each input's own random vector, the mixed start, and the
low-precision presolve that computes the vectors the full-precision run starts from.

A random start is uniform on the unit sphere of ``R^N`` (``N = n d``), drawn per input from a seeded generator.
The mixed start of an input is ``w + τ g`` (normalized), ``w`` the unit top right vector found for another input
of the batch and ``g`` this input's own random start, independent of ``w``; ``τ`` is the noise weight
(:data:`NOISE_WEIGHT`). Where the inputs' top directions are alike (windows of one text through one layer), it
starts close to the top and saves Lanczos products; where they differ, or cross (another input's top direction
is this input's second), the noise keeps this input's own top within reach.

**What a mixed start costs in certainty** (derived in full, and checked at a planted crossing, in the chapter *A
start borrowed from another input*; :mod:`lipnb.experiments.mixed_start`): the worst-case bounds of the chapter *A
probability instead of a premise* on the probability that Lanczos or the power iteration misses the top after ``k``
products (:mod:`lipnb.experiments.random_start`, and the forms :func:`lipnb.core.krylov.failure_epsilon` uses) are
proved by showing that a miss forces the start's component along the top eigenvector ``v₁`` to be small,
``|⟨u, v₁⟩| ≤ t ‖u‖``, and bounding that event's probability ``F(t)`` for a start uniform on the sphere.
For the mixed start, ``‖u‖ ≤ 1 + τ`` and ``⟨u, v₁⟩ = ⟨w, v₁⟩ + τ ⟨g, v₁⟩``; the
density of ``⟨g, v₁⟩`` is symmetric and non-increasing in ``|x|`` (``N ≥ 3``), so a shift by ``⟨w, v₁⟩`` only
lowers the mass of a centred interval (Anderson), and ``F`` is concave with ``F(0) = 0``. Hence
``P(|⟨u, v₁⟩| ≤ t ‖u‖) ≤ F((1 + τ) t / τ) ≤ (1 + τ)/τ · F(t)``: those bounds hold for the mixed start multiplied
by ``(1 + τ)/τ`` (1.5 at ``τ = 2``), whatever ``w`` is, as long as ``g`` is independent of it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .krylov import KrylovOutcome, NormalOperator, normalize
from .linearization import Linearized

__all__ = ["NOISE_WEIGHT", "PRESOLVE_MAX_ITER", "failure_factor", "mixed_starts", "presolved_starts",
           "random_starts"]

# τ: the norm of the random part of a mixed start over the norm of the other input's top vector.
NOISE_WEIGHT = 2.0
# The presolve stops an input at this relative residual, after at most this many products.
_PRESOLVE_TOL, PRESOLVE_MAX_ITER = 1e-3, 50


def failure_factor(tau: float = NOISE_WEIGHT) -> float:
    """``(1 + τ)/τ``: a mixed start misses the top at most this many times as often as a random start's bound says."""
    return (1 + tau) / tau


def random_starts(X: Tensor, seed: int) -> Tensor:
    """One start per input, uniform on the unit sphere (a normalized Gaussian), from a generator seeded ``seed``."""
    generator = torch.Generator(device=X.device).manual_seed(seed)
    return normalize(torch.randn(X.shape, generator=generator, device=X.device, dtype=X.dtype))


def mixed_starts(random: Tensor, top: Tensor, tau: float = NOISE_WEIGHT) -> Tensor:
    """``normalize(w + τ g_b)`` for each row ``g_b`` of ``random`` (unit random starts) and ``w`` the unit vector
    ``top`` (``(1, n, d)``, another input's top right vector, found without reading ``random``)."""
    return normalize(normalize(top) + tau * random)


def presolved_starts(solver: Callable[..., KrylovOutcome], low: Linearized, shrink: float, u: Tensor,
                     top: Tensor | None, steps: int, mixed: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """The low-precision first run (``low``: the linearization in the presolve's dtype) from the random starts
    ``u``, each input stopped at :data:`_PRESOLVE_TOL` or after ``steps`` products: ``(vectors, products per input,
    top)``. With ``mixed``, every input starts from ``top`` (another input's presolved vector) plus its random start
    (:func:`mixed_starts`); without a ``top`` yet, the first input of the chunk is presolved alone first from its
    random start (a pilot: its vector is the next ``top`` and its own start, which costs it one more product)."""
    pilot = 0
    if mixed and top is None and len(u) > 1:
        first = solver(NormalOperator(low.select(torch.zeros(1, dtype=torch.long, device=u.device)), shrink), u[:1],
                       _PRESOLVE_TOL, steps)
        top, pilot = first.vector, int(first.iterations[0])
        u = torch.cat([top, mixed_starts(u[1:], top)])
    elif mixed and top is not None:
        u = mixed_starts(u, top)
    run = solver(NormalOperator(low, shrink), u, _PRESOLVE_TOL, steps)
    run.iterations[0] += pilot
    return run.vector, run.iterations, top
