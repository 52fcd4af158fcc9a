"""The mixed start (``start="mixed"``, the default where a presolve runs): another input's presolved top vector plus
this input's own random start of weight ``τ``. Its chance of missing the top is at most ``(1 + τ)/τ`` times a random
start's worst-case bound (:mod:`lipnb.core.starts`, checked here by sampling), and at crossings, where the other
input's top direction is this input's second (the case that got ``start="shared"`` withdrawn), it never returns the
second singular value as converged (against the exact spectrum, checked on the dense float64 Jacobian)."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from torch import Tensor

from lipnb.core.dense import jacobian_matrix
from lipnb.core.linearization import ClosedForm
from lipnb.core.lipschitz import local_lipschitz
from lipnb.core.starts import NOISE_WEIGHT, failure_factor, mixed_starts, random_starts
from lipnb.experiments.certificate import _orthogonal

F32, F64 = torch.float32, torch.float64


class QuadraticLinearization(ClosedForm):
    """``J = U diag(z) Vᵀ`` at ``x`` (``z = Vᵀx``): the Jacobian of ``x -> U (Vᵀx)² / 2``, in closed form."""

    batched: ClassVar[tuple[str, ...]] = ("z",)
    parameters: ClassVar[tuple[str, ...]] = ("U", "V")

    def __init__(self, U: Tensor, V: Tensor, z: Tensor, shape: torch.Size) -> None:
        self.U, self.V, self.z, self.shape = U, V, z, shape
        self.output = (0.5 * z.square() @ U.T).view(len(z), *shape)

    def jvp(self, e: Tensor) -> Tensor:
        return ((e.flatten(1) @ self.V) * self.z @ self.U.T).view(len(e), *self.shape)

    def vjp(self, g: Tensor) -> Tensor:
        return ((g.flatten(1) @ self.U) * self.z @ self.V.T).view(len(g), *self.shape)


class Quadratic:
    """``x -> U (Vᵀx)² / 2`` on ``(B, n, d)`` with closed-form products that cast (so a presolve runs)."""

    def __init__(self, U: Tensor, V: Tensor) -> None:
        self.U, self.V = U, V

    def linearize(self, X: Tensor) -> QuadraticLinearization:
        U, V = self.U.to(X.dtype), self.V.to(X.dtype)
        return QuadraticLinearization(U, V, X.flatten(1) @ V, X.shape[1:])

    def __call__(self, X: Tensor) -> Tensor:
        return self.linearize(X).output


def crossing(n: int, d: int, B: int, seed: int) -> tuple[Quadratic, Tensor, Tensor]:
    """Top singular values ``1 + t`` and ``1 - t`` in two fixed directions, ``t`` from ``0.1`` to ``-0.1`` along the
    batch: input 0's top right vector is the second one of the last inputs. The map, float32 inputs, the spectra."""
    g = torch.Generator().manual_seed(seed)
    N = n * d
    t = torch.linspace(0.1, -0.1, B, dtype=F64)
    rest = (0.1 + 0.7 * torch.rand(N - 2, generator=g, dtype=F64)).expand(B, N - 2)
    spectra = torch.cat([(1 + t).unsqueeze(1), (1 - t).unsqueeze(1), rest], dim=1)
    U, V = _orthogonal(N, g), _orthogonal(N, g)
    X = (spectra @ V.T).view(B, n, d).float()
    return Quadratic(U, V), X, spectra


@pytest.mark.parametrize(("n", "d"), [(4, 4), (16, 16)], ids=["N=16", "N=256"])
def test_mixed_start_never_returns_the_second_at_a_crossing(n: int, d: int) -> None:
    """Eight inputs whose top two directions swap along the batch, 12 seeds, the presolve in bfloat16: the first
    input's presolved top vector is the last inputs' second singular vector, and every converged input is still
    within its ``error`` of its own top singular value (a shared start converged to the second, 10% low)."""
    for seed in range(12):
        fn, X, spectra = crossing(n, d, 8, seed)
        res = local_lipschitz(fn, X, presolve=torch.bfloat16, seed=seed, detailed=True)
        top = spectra.amax(1)
        assert int(res.presolve_iterations.min()) >= 1
        assert bool(res.converged.all())
        miss = (top - res.value.double()).abs() / res.value.double()
        assert bool((miss <= res.error.double() + 1e-7).all()), (seed, miss.max(), res.error.max())


def test_crossing_spectrum_is_the_dense_jacobian_s() -> None:
    fn, X, spectra = crossing(4, 4, 8, 0)
    dense = torch.linalg.svdvals(jacobian_matrix(fn, X.double()))
    assert torch.allclose(dense, spectra.sort(dim=1, descending=True).values, atol=1e-6)


def test_mixed_and_random_starts_agree_on_real_attention() -> None:
    """On a batch of similar inputs both starts give values within their errors of each other, and the mixed one
    needs fewer presolve products in all."""
    g = torch.Generator().manual_seed(4)
    n, d = 24, 16
    from lipnb.core.attention import MultiHead
    from lipnb.core.jacobian import MultiHeadMap
    heads = MultiHead(torch.randn(2, d, d, generator=g) / d, torch.randn(2, 8, d, generator=g) / d ** 0.5,
                      torch.randn(2, d, 8, generator=g) / 8 ** 0.5)
    fn = MultiHeadMap(heads)
    X = torch.randn(1, n, d, generator=g) + 0.3 * torch.randn(12, n, d, generator=g)
    mixed = local_lipschitz(fn, X, presolve=torch.bfloat16, detailed=True)
    rand = local_lipschitz(fn, X, presolve=torch.bfloat16, start="random", detailed=True)
    gap = (mixed.value.double() - rand.value.double()).abs() / rand.value.double()
    assert bool((gap <= mixed.error + rand.error).all())
    assert int(mixed.presolve_iterations.sum()) < int(rand.presolve_iterations.sum())


@pytest.mark.parametrize("tau", [0.5, NOISE_WEIGHT, 8.0])
@pytest.mark.parametrize("where", ["orthogonal", "halfway", "aligned"])
def test_small_top_component_is_at_most_the_factor_more_likely(tau: float, where: str) -> None:
    """The lemma behind the mixed start, sampled: ``P(|⟨u, v₁⟩| ≤ t ‖u‖)`` for ``u = w + τ g`` (``w`` unit, fixed;
    ``g`` uniform on the sphere of ``R^20``) is at most ``(1 + τ)/τ`` times ``P(|⟨g, v₁⟩| ≤ t)``, for ``w``
    orthogonal to ``v₁`` (the crossing: nearly tight for small ``τ``), halfway, or along it; 200,000 draws, the
    comparison allowing four standard errors."""
    N, draws = 20, 200_000
    g = torch.randn(draws, N, generator=torch.Generator().manual_seed(int(10 * tau)), dtype=F64)
    g = g / g.norm(dim=1, keepdim=True)
    v1 = torch.zeros(N, dtype=F64)
    v1[0] = 1.0
    w = {"orthogonal": torch.eye(N, dtype=F64)[1], "halfway": (torch.eye(N, dtype=F64)[0] + torch.eye(N, dtype=F64)[1])
         / 2 ** 0.5, "aligned": v1}[where]
    u = w + tau * g
    for t in (0.005, 0.02, 0.05):
        mixed = ((u @ v1).abs() <= t * u.norm(dim=1)).double().mean()
        uniform = ((g @ v1).abs() <= t).double().mean()
        bound = failure_factor(tau) * uniform
        assert float(mixed) <= float(bound) + 4 * float((bound / draws).sqrt()), (t, float(mixed), float(bound))


def test_mixed_starts_are_unit_and_seeded() -> None:
    X = torch.zeros(5, 3, 4)
    u = random_starts(X, 3)
    assert torch.equal(u, random_starts(X, 3)) and torch.allclose(u.flatten(1).norm(dim=1), torch.ones(5))
    m = mixed_starts(u, u[:1])
    assert torch.allclose(m.flatten(1).norm(dim=1), torch.ones(5))
    assert failure_factor(NOISE_WEIGHT) == 1.5
    assert float((m[1].flatten() @ (u[:1].flatten() + NOISE_WEIGHT * u[1].flatten())).abs()) > 0
    assert X.dtype == F32
