"""The estimator against dense truth (:mod:`lipnb.experiments.estimator_accuracy`), on linear maps whose singular
values are known in closed form, and on self-attention against the dense float64 SVD."""

from __future__ import annotations

import pytest
import torch

from lipnb import self_attention
from lipnb.experiments.estimator_accuracy import estimator_agreement, estimator_convergence

F64 = torch.float64


def _linear(singular_values: list[float]) -> tuple[object, float, float]:
    """A linear map on (B, 1, d) whose Jacobian is diag(singular_values): its two largest singular values."""
    s = torch.tensor(singular_values, dtype=F64)
    top = s.sort(descending=True).values
    return (lambda Z: Z * s), top[0].item(), top[1].item()


def test_agreement_on_a_linear_map_equals_the_closed_form() -> None:
    fn, top, _ = _linear([3.0, 1.0, 0.5, 0.25])
    X = torch.randn(3, 1, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    table = estimator_agreement({"diagonal": fn}, X)
    assert len(table) == 6 and set(table.frame.method) == {"lanczos", "power"}
    torch.testing.assert_close(table["exact"], torch.full((6,), top, dtype=F64), rtol=1e-12, atol=0)
    torch.testing.assert_close(table["value"], torch.full((6,), top, dtype=F64), rtol=1e-4, atol=0)
    assert bool((table["converged"] == 1).all()) and bool((table["iterations"] >= 1).all())


def test_agreement_on_attention_matches_the_dense_svd() -> None:
    g = torch.Generator().manual_seed(1)
    A, V = torch.randn(2, 4, 4, dtype=F64, generator=g) / 2
    X = torch.randn(2, 5, 4, dtype=F64, generator=g)
    table = estimator_agreement({"head": lambda Z: self_attention(Z, A, V)}, X, methods=["lanczos"])
    J = torch.stack([torch.autograd.functional.jacobian(lambda x: self_attention(x[None], A, V)[0], x).reshape(20, 20)
                     for x in X])
    torch.testing.assert_close(table["exact"], torch.linalg.matrix_norm(J, ord=2), rtol=1e-12, atol=0)
    torch.testing.assert_close(table["value"], table["exact"], rtol=1e-4, atol=0)


def test_power_converges_at_the_rate_of_the_two_top_singular_values() -> None:
    """The power iteration's Rayleigh quotient misses ``σ₁²`` by a factor ``(σ₂/σ₁)⁴`` less per product."""
    fn, top, second = _linear([1.0, 0.9, 0.3, 0.1])
    X = torch.randn(1, 1, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    table = estimator_convergence(fn, X, range(10, 31))
    power = table.where(method="power")["error"]
    rates = power[1:] / power[:-1]
    torch.testing.assert_close(rates, torch.full_like(rates, (second / top) ** 4), rtol=2e-2, atol=0)
    assert table.where(method="lanczos")["error"][-1].item() <= 1e-12


def test_refusals() -> None:
    X = torch.randn(2, 3, 4, dtype=F64)
    with pytest.raises(ValueError, match="one input"):
        estimator_convergence(lambda Z: Z, X, [1, 2])
    with pytest.raises(ValueError, match="methods"):
        estimator_agreement({"id": lambda Z: Z}, X, methods=["lanczos", "lanczos"])
    with pytest.raises(TypeError, match="maps"):
        estimator_agreement({}, X)
