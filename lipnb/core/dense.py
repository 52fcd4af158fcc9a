"""Dense Jacobians in float64, the ground truth on small problems: ``D_X f`` as a matrix, its spectral norm
(Lemma 3.1's exact local constant) and Lemma C.5's weighted norm. The one home of a dense Jacobian in lipnb.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..arguments import check_tokens
from . import memory
from .attention import log_weights
from .linearization import linearization_bytes

__all__ = ["exact_local_lipschitz", "jacobian_matrix", "weighted_operator_norm"]

Map = Callable[[Tensor], Tensor]


def jacobian_matrix(fn: Map, X: Tensor, *, differentiable: bool = False) -> Tensor:
    """Dense Jacobians ``D_{X_b} fn`` in float64, shape ``(B, n' d', n d)``: ground truth for small inputs.

    Forward mode: basis direction ``j`` of every element at once goes through one JVP of ``fn`` at the
    whole batch, so ``fn`` may close over per-batch data (it must act on each element separately, as
    for :func:`local_lipschitz`). Directions are vectorized with ``torch.func.vmap``, as many at a time
    as the memory budget allows. With ``differentiable``, the Jacobians keep ``X``'s dtype and autograd
    graph, for gradient steps on a norm of them: reverse mode, ``fn`` applied to one input ``(1, n, d)`` at a
    time, vectorized over the batch with ``torch.func.vmap`` when ``fn`` allows it (no data-dependent control
    flow, such as an argument check, under ``vmap``), else input after input; both give the same matrices.
    """
    check_tokens(X)
    if differentiable:
        B, n, d = X.shape

        def single(x: Tensor) -> Tensor:
            return fn(x.view(1, n, d)).reshape(-1)

        flat = X.reshape(B, n * d)
        try:
            return torch.func.vmap(torch.func.jacrev(single))(flat)
        except RuntimeError as error:
            if "vmap" not in str(error):
                raise
        return torch.stack([torch.autograd.functional.jacobian(single, x, create_graph=True, vectorize=True)
                            for x in flat])
    X = X.detach().double()
    B, n, d = X.shape
    N = n * d
    per_direction = 3 * linearization_bytes(fn, X) + 2 * X.numel() * X.element_size()   # also checks fn's output
    chunk = max(1, min(N, memory.memory_budget(X.device) // per_direction))
    basis = torch.eye(N, dtype=X.dtype, device=X.device).view(N, 1, n, d).expand(N, B, n, d)
    with sdpa_kernel(SDPBackend.MATH):          # the fused attention kernels have no forward-mode AD
        columns = torch.func.vmap(lambda t: torch.func.jvp(fn, (X,), (t,))[1], chunk_size=chunk)(basis)
    return columns.detach().reshape(N, B, -1).permute(1, 2, 0)


def exact_local_lipschitz(fn: Map, X: Tensor) -> Tensor:
    """Lemma 3.1: the exact ``||D_{X_b} fn||_2`` from the dense float64 SVD, shape ``(B,)``."""
    return torch.linalg.matrix_norm(jacobian_matrix(fn, X), ord=2)


def weighted_operator_norm(fn: Map, X: Tensor, weights: Tensor) -> Tensor:
    """Lemma C.5: ``||W^{1/2} D_X fn W^{-1/2}||_2`` with ``W = diag(w) ⊗ I``, float64, shape ``(B,)``.

    With ``fn`` the weighted self-attention of Def C.4, this is the local Lipschitz constant of
    mean-field attention at the measure ``sum_i w_i δ_{x_i}`` for the Wasserstein-2 distance.
    """
    check_tokens(X)
    w = log_weights(weights, X.double()).exp().squeeze(1)
    J = jacobian_matrix(fn, X)
    n = X.shape[1]
    root_out = w.sqrt().repeat_interleave(J.shape[1] // n, dim=1)
    root_in = w.sqrt().repeat_interleave(J.shape[2] // n, dim=1)
    return torch.linalg.matrix_norm(root_out.unsqueeze(2) * J / root_in.unsqueeze(1), ord=2)
