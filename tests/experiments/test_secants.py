"""Secants and difference quotients (:mod:`lipnb.experiments.secants`) against closed forms of linear maps and
dense float64 Jacobians of self-attention."""

from __future__ import annotations

import torch

from lipnb import exact_local_lipschitz, self_attention
from lipnb.experiments.secants import difference_quotients, secant_ratios

F64 = torch.float64


def test_a_linear_map_attains_its_norm_along_its_top_singular_vector() -> None:
    g = torch.Generator().manual_seed(0)
    M = torch.randn(3, 3, dtype=F64, generator=g)
    fn = lambda Z: Z @ M.T  # noqa: E731
    _, S, Vh = torch.linalg.svd(M)
    X = torch.randn(2, 4, 3, dtype=F64, generator=g)
    top = torch.zeros_like(X)
    top[:, 1] = Vh[0]
    torch.testing.assert_close(secant_ratios(fn, X, top, [1e-3, 1.0, 5.0]), torch.ones(2, 3, dtype=F64),
                               rtol=1e-6, atol=0)
    other = torch.randn(2, 4, 3, dtype=F64, generator=g)
    ratios = secant_ratios(fn, X, other, [1.0])
    expected = (other @ M.T).flatten(1).norm(dim=1) / other.flatten(1).norm(dim=1) / S[0]
    torch.testing.assert_close(ratios[:, 0], expected, rtol=1e-6, atol=0)
    quotients = difference_quotients(fn, X[:1], top[:1], [1e-6, 1.0])
    torch.testing.assert_close(quotients, S[0].expand(1, 2), rtol=1e-9, atol=0)


def test_secants_of_attention_stay_below_the_dense_supremum() -> None:
    g = torch.Generator().manual_seed(1)
    A, V = torch.randn(2, 3, 3, dtype=F64, generator=g)
    fn = lambda Z: self_attention(Z, A, V)  # noqa: E731
    X, U = torch.randn(2, 2, 4, 3, dtype=F64, generator=g)
    ratios = secant_ratios(fn, X, U, [0.5, 2.0], points=9)
    # the same ratio from dense Jacobians at the same nine points of each segment
    unit = U / U.flatten(1).norm(dim=1).view(-1, 1, 1)
    for b in range(2):
        for k, s in enumerate([0.5, 2.0]):
            Y = X[b:b + 1] + s * unit[b:b + 1]
            points = X[b:b + 1] + torch.linspace(0, 1, 9, dtype=F64).view(-1, 1, 1) * (Y - X[b:b + 1])
            sup = exact_local_lipschitz(fn, points).max()
            secant = (fn(Y) - fn(X[b:b + 1])).norm() / s
            torch.testing.assert_close(ratios[b, k], secant / sup, rtol=1e-5, atol=0)
    assert bool((ratios <= 1 + 1e-5).all())


def test_the_quotient_tends_to_the_directional_derivative() -> None:
    g = torch.Generator().manual_seed(2)
    A, V = torch.randn(2, 3, 3, dtype=F64, generator=g)
    fn = lambda Z: self_attention(Z, A, V)  # noqa: E731
    X, U = torch.randn(2, 1, 4, 3, dtype=F64, generator=g)
    _, derivative = torch.func.jvp(fn, (X,), (U / U.norm(),))
    q = difference_quotients(fn, X, U, [1e-7])
    torch.testing.assert_close(q[0, 0], derivative.norm(), rtol=1e-5, atol=0)
