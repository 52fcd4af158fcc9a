"""lipnb.core.dense, the ground truth of the other tests, against maps whose Jacobian is known in closed form and
against finite differences."""

from __future__ import annotations

import torch

from lipnb import self_attention
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix, weighted_operator_norm

F64 = torch.float64


def test_the_jacobian_of_a_linear_map_is_its_matrix() -> None:
    """``f(X) = L X W`` (tokens mixed by ``L``, features by ``W``): ``vec f = (L ⊗ Wᵀ) vec X`` row-major."""
    g = torch.Generator().manual_seed(0)
    L, W = torch.randn(3, 4, generator=g, dtype=F64), torch.randn(2, 5, generator=g, dtype=F64)
    X = torch.randn(2, 4, 2, generator=g, dtype=F64)
    J = jacobian_matrix(lambda Z: L @ Z @ W, X)
    assert J.shape == (2, 3 * 5, 4 * 2)
    torch.testing.assert_close(J, torch.kron(L, W.mT.contiguous()).repeat(2, 1, 1), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(exact_local_lipschitz(lambda Z: L @ Z @ W, X),
                               (torch.linalg.matrix_norm(L, 2) * torch.linalg.matrix_norm(W, 2)).expand(2))


def test_the_jacobian_of_attention_matches_central_differences() -> None:
    g = torch.Generator().manual_seed(1)
    A, V = torch.randn(2, 3, 3, generator=g, dtype=F64)
    X = torch.randn(2, 4, 3, generator=g, dtype=F64)

    def fn(Z: torch.Tensor) -> torch.Tensor:
        return self_attention(Z, A, V)

    J = jacobian_matrix(fn, X)
    h, columns = 1e-6, []
    for j in range(X[0].numel()):
        E = torch.zeros_like(X).view(2, -1)
        E[:, j] = h
        E = E.view_as(X)
        columns.append(((fn(X + E) - fn(X - E)) / (2 * h)).flatten(1))
    torch.testing.assert_close(J, torch.stack(columns, dim=2), rtol=1e-7, atol=1e-8)
    # each input alone: the batch does not mix
    torch.testing.assert_close(jacobian_matrix(fn, X[1:]), J[1:], rtol=0, atol=0)


def test_the_differentiable_jacobian_is_the_same_matrix_with_a_graph() -> None:
    g = torch.Generator().manual_seed(2)
    A, V = torch.randn(2, 3, 3, generator=g, dtype=F64)
    X = torch.randn(2, 4, 3, generator=g, dtype=F64).requires_grad_(True)

    def fn(Z: torch.Tensor) -> torch.Tensor:
        return torch.softmax(Z @ A @ Z.mT, dim=-1) @ Z @ V.mT  # no argument checks, so it runs under vmap

    J = jacobian_matrix(fn, X, differentiable=True)
    assert J.requires_grad
    torch.testing.assert_close(J.detach(), jacobian_matrix(fn, X), rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(J.square().sum(), X)
    assert torch.isfinite(grad).all() and grad.abs().max() > 0


def test_weighted_operator_norm_is_the_norm_of_the_rescaled_jacobian() -> None:
    """Uniform weights change nothing; other weights rescale the blocks ``J_ij`` by ``√(w_i / w_j)``."""
    g = torch.Generator().manual_seed(3)
    L, W = torch.randn(3, 3, generator=g, dtype=F64), torch.randn(2, 2, generator=g, dtype=F64)
    X = torch.randn(1, 3, 2, generator=g, dtype=F64)

    def fn(Z: torch.Tensor) -> torch.Tensor:
        return L @ Z @ W

    uniform = torch.full((3,), 1 / 3, dtype=F64)
    torch.testing.assert_close(weighted_operator_norm(fn, X, uniform), exact_local_lipschitz(fn, X))
    w = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    rescaled = torch.diag(w.sqrt()) @ L @ torch.diag(w.rsqrt())  # the blocks of L ⊗ Wᵀ, rescaled
    expected = torch.linalg.matrix_norm(rescaled, 2) * torch.linalg.matrix_norm(W, 2)
    torch.testing.assert_close(weighted_operator_norm(fn, X, w), expected.expand(1))
