"""lipnb.core.krylov: the batched power iteration and Lanczos against dense float64 singular values."""

from __future__ import annotations

import pytest
import torch
from conftest import prescribed_jacobians
from hypothesis import given
from hypothesis import strategies as st

from lipnb.core import krylov
from lipnb.core.krylov import NormalOperator, fill_holes, lanczos, power_iteration

F64 = torch.float64


class Dense:
    """A linearization given by explicit Jacobians ``J (B, m, N)`` acting on inputs of shape ``(B, n, d)``."""

    def __init__(self, J: torch.Tensor, shape: tuple[int, int]) -> None:
        self.J, self.shape = J, shape
        self.output = torch.zeros(len(J), J.shape[1], dtype=J.dtype)

    def jvp(self, u: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bmn,bn->bm", self.J, u.flatten(1))

    def vjp(self, v: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bmn,bm->bn", self.J, v).view(-1, *self.shape)

    def select(self, index: torch.Tensor) -> Dense:
        return Dense(self.J[index], self.shape)


def spectrum_problem(values: list[list[float]], n: int = 3, d: int = 4, seed: int = 0) -> torch.Tensor:
    """Jacobians ``U diag(s) Vᵀ`` of shape ``(B, n d, n d)`` with prescribed singular values per input."""
    return prescribed_jacobians(values, n, d, torch.Generator().manual_seed(seed))


def start(B: int, n: int = 3, d: int = 4, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)


SPECTRA = [[3.0, 1.0, 0.5], [2.0, 1.99, 1.0, 0.3], [1.0], [5.0, 4.0, 3.0, 2.0, 1.0]]


def test_lanczos_finds_the_top_squared_singular_value_of_each_input() -> None:
    J = spectrum_problem(SPECTRA)
    out = lanczos(NormalOperator(Dense(J, (3, 4)), 1.0), start(len(J)), tol=1e-12, max_iter=50)
    expected = torch.linalg.matrix_norm(J, 2) ** 2
    torch.testing.assert_close(out.sigma ** 2, expected, rtol=1e-10, atol=0)
    assert bool(out.converged.all())
    top = torch.linalg.svd(J).Vh[:, 0]                            # the top right singular vectors
    alignment = torch.einsum("bn,bn->b", out.vector.flatten(1), top).abs()
    torch.testing.assert_close(alignment, torch.ones_like(alignment), rtol=1e-5, atol=0)


def test_power_iteration_converges_at_the_rate_of_the_gap() -> None:
    J = spectrum_problem([[3.0, 1.0], [2.0, 1.99]])
    out = power_iteration(NormalOperator(Dense(J, (3, 4)), 1.0), start(2), tol=1e-10, max_iter=5000)
    torch.testing.assert_close(out.sigma ** 2, torch.linalg.matrix_norm(J, 2) ** 2, rtol=1e-8, atol=0)
    assert bool(out.converged.all())
    # The residual falls like (s2/s1)^(2k): a gap of 3 needs far fewer steps than a gap of 1.005.
    assert int(out.iterations[0]) < 30 < int(out.iterations[1])


def test_each_input_stops_on_its_own_and_gets_what_it_gets_alone() -> None:
    J = spectrum_problem(SPECTRA)
    u = start(len(J))
    together = lanczos(NormalOperator(Dense(J, (3, 4)), 0.5), u, tol=1e-10, max_iter=50)
    for b in range(len(J)):
        alone = lanczos(NormalOperator(Dense(J[b:b + 1], (3, 4)), 0.5), u[b:b + 1], tol=1e-10, max_iter=50)
        torch.testing.assert_close(together.sigma[b:b + 1], alone.sigma, rtol=1e-12, atol=0)
        assert int(together.iterations[b]) == int(alone.iterations[0])
    assert len(set(together.iterations.tolist())) > 1


def test_an_input_that_runs_out_of_iterations_is_flagged() -> None:
    J = spectrum_problem([[2.0, 1.999, 1.998, 1.0]])
    out = power_iteration(NormalOperator(Dense(J, (3, 4)), 1.0), start(1), tol=1e-12, max_iter=20)
    assert not bool(out.converged[0]) and int(out.iterations[0]) == 20 and float(out.residual[0]) > 1e-12
    assert float(out.sigma[0]) ** 2 <= float(torch.linalg.matrix_norm(J[0], 2)) ** 2 * (1 + 1e-12)


def test_a_zero_jacobian_stops_at_once_with_zero() -> None:
    J = torch.zeros(1, 12, 12, dtype=F64)
    for solver in (lanczos, power_iteration):
        out = solver(NormalOperator(Dense(J, (3, 4)), 1.0), start(1), tol=1e-10, max_iter=10)
        assert float(out.sigma[0]) == 0.0 and int(out.iterations[0]) == 1


def test_the_normal_operator_keeps_its_rows_after_shrinking() -> None:
    J = spectrum_problem(SPECTRA)
    normal = NormalOperator(Dense(J, (3, 4)), 1.0)
    u = start(len(J))
    keep = torch.tensor([True, False, True, True])
    normal.keep(keep)
    dense = torch.einsum("bmn,bmk,bk->bn", J[keep], J[keep], u[keep].flatten(1)).view(-1, 3, 4)
    product = normal(u[keep])                       # c² JᵀJ u, with c set at this first product
    torch.testing.assert_close(product / normal.scale[keep].view(-1, 1, 1) ** 2, dense, rtol=1e-12, atol=1e-12)


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_fill_holes_keeps_every_kept_row_once_and_moves_few(mask: list[bool]) -> None:
    keep = torch.tensor(mask, dtype=torch.bool)
    perm, holes, movers = fill_holes(keep)
    assert sorted(perm.tolist()) == torch.nonzero(keep).flatten().tolist()
    size = int(keep.sum())
    stay = [j for j in range(size) if bool(keep[j])]
    assert all(int(perm[j]) == j for j in stay)
    assert len(holes) == len(movers) == size - len(stay)


def test_interval_products_is_the_fewest_that_reach_eta() -> None:
    """``interval_products``: after ``k`` products the failure ε is within the η target, after ``k - 1`` not."""
    for delta, N, eta in ((1e-2, 128 * 384, 1e-2), (1e-6, 128 * 768, 1e-4), (0.5, 10, 0.3)):
        k, target = krylov.interval_products(delta, N, eta), 1 - (1 + eta) ** -2
        assert float(krylov.failure_epsilon(delta, N, k)) <= target < float(krylov.failure_epsilon(delta, N, k - 1))
    with pytest.raises(ValueError, match="delta"):
        krylov.interval_products(0.0, 10, 0.1)


def test_relaxed_lanczos_needs_a_low_precision_twin() -> None:
    """``relaxed=True`` without ``NormalOperator(low=...)`` is a clear error before any product."""
    J = torch.randn(2, 12, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match="low-precision twin"):
        lanczos(NormalOperator(Dense(J, (3, 4)), 1.0), start(2), tol=1e-6, max_iter=5, relaxed=True)
