"""Local Lipschitz constants ``Lip_X(f) = ||D_X f||_2`` (Lemma 3.1, App. E.1 of Castin et al., 2024).

Matrix-free estimates work on the whole batch at once: one forward pass per input builds the
linearization, and every step then costs one Jacobian-vector and one vector-Jacobian product.
Dense float64 Jacobians serve as ground truth on small problems.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .attention import check_tokens

__all__ = [
    "LipschitzResult",
    "NotConvergedWarning",
    "exact_local_lipschitz",
    "jacobian_matrix",
    "linearize",
    "local_lipschitz",
    "weighted_operator_norm",
]

Map = Callable[[Tensor], Tensor]


class NotConvergedWarning(UserWarning):
    """Some inputs of a batch did not meet the convergence test within the iteration cap."""


@dataclass(frozen=True)
class LipschitzResult:
    """Per-input estimates of ``||D_X f||_2`` with what is needed to trust them.

    ``value``, ``iterations``, ``converged`` and ``residual`` have shape ``(B,)``; ``iterations``
    counts applications of ``JᵀJ`` (one JVP and one VJP each); ``residual`` is
    ``||JᵀJ u - θ u|| / θ`` for the final estimate ``θ = value²`` and unit vector ``u``;
    ``right_vector`` (``(B, n, d)``) is the unit input direction of fastest change and
    ``left_vector`` (``(B, n, d_out)``) the unit output direction it is sent to.
    """

    value: Tensor
    iterations: Tensor
    converged: Tensor
    residual: Tensor
    right_vector: Tensor
    left_vector: Tensor
    method: str


@dataclass(frozen=True)
class Linearization:
    """``J = D_X f`` at a fixed batch ``X``: ``jvp(u) = J u`` and ``vjp(v) = Jᵀ v``, batched."""

    output: Tensor
    jvp: Map
    vjp: Map


def linearize(fn: Map, X: Tensor) -> Linearization:
    """Record one forward pass of ``fn`` at ``X`` and return reusable JVP and VJP closures.

    The JVP is the transpose of the VJP, obtained by differentiating the VJP with respect to its
    (dummy) cotangent, so no later product re-runs the forward pass.
    """
    Xg = X.detach().requires_grad_(True)
    with torch.enable_grad():
        Y = fn(Xg)
        if not isinstance(Y, Tensor) or Y.dim() != 3 or Y.shape[0] != X.shape[0]:
            shape = tuple(Y.shape) if isinstance(Y, Tensor) else type(Y).__name__
            raise ValueError(f"fn must map (B, n, d) to (B, n', d') with the same B = {X.shape[0]};"
                             f" it returned {shape}")
        if not Y.requires_grad:
            zero_in, zero_out = torch.zeros_like(X), torch.zeros_like(Y)
            return Linearization(Y.detach(), lambda u: zero_out, lambda v: zero_in)
        G = torch.zeros_like(Y, requires_grad=True)
        (JtG,) = torch.autograd.grad(Y, Xg, G, create_graph=True)

    def jvp(u: Tensor) -> Tensor:
        with torch.enable_grad():
            (Ju,) = torch.autograd.grad(JtG, G, u, retain_graph=True, allow_unused=True)
        return torch.zeros_like(Y) if Ju is None else Ju

    def vjp(v: Tensor) -> Tensor:
        with torch.enable_grad():
            (Jtv,) = torch.autograd.grad(Y, Xg, v, retain_graph=True)
        return Jtv

    return Linearization(Y.detach(), jvp, vjp)


def _batched_dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).flatten(1).sum(1)


def _normalize(v: Tensor) -> Tensor:
    norm = v.flatten(1).norm(dim=1).clamp_min(torch.finfo(v.dtype).tiny)
    return v / norm.view(-1, *([1] * (v.dim() - 1)))


def _power(normal: Map, u: Tensor, tol: float, max_iter: int) -> tuple[Tensor, ...]:
    """App. E.1: ``u <- JᵀJ u / ||JᵀJ u||``, each input stopped when its residual is below ``tol``."""
    B = u.shape[0]
    theta = u.new_zeros(B, dtype=torch.float64)
    residual = torch.full_like(theta, torch.inf)
    iterations = torch.zeros(B, dtype=torch.long, device=u.device)
    done = torch.zeros(B, dtype=torch.bool, device=u.device)
    for _ in range(max_iter):
        Mu = normal(u)
        th = _batched_dot(u, Mu).double()
        res = (Mu - th.to(u.dtype).view(-1, 1, 1) * u).flatten(1).norm(dim=1).double()
        active = ~done
        theta = torch.where(active, th, theta)
        residual = torch.where(active, res / th.clamp_min(torch.finfo(torch.float64).tiny), residual)
        iterations += active.long()
        done = done | (residual <= tol) | (th <= 0)
        u = torch.where(active.view(-1, 1, 1), _normalize(Mu), u)
        if bool(done.all()):
            break
    return theta, iterations, done, residual, u


def _lanczos(normal: Map, u: Tensor, tol: float, max_iter: int) -> tuple[Tensor, ...]:
    """Lanczos on ``JᵀJ`` with full reorthogonalisation, batched; stops each input on its own.

    The top Ritz value ``θ`` never exceeds ``||J||²``; an input stops when the residual of its top
    Ritz pair, ``β_k |s_k|``, is at most ``tol θ``, or when its Krylov space is invariant.
    """
    B = u.shape[0]
    shape = u.shape
    N = u[0].numel()
    m = min(max_iter, N)
    q = _normalize(u).flatten(1)
    basis = q.new_zeros(m, B, N)
    alpha = q.new_zeros(B, m, dtype=torch.float64)
    beta = q.new_zeros(B, m, dtype=torch.float64)
    iterations = torch.zeros(B, dtype=torch.long, device=u.device)
    done = torch.zeros(B, dtype=torch.bool, device=u.device)
    theta = q.new_zeros(B, dtype=torch.float64)
    residual = torch.full_like(theta, torch.inf)
    s = None
    for k in range(m):
        basis[k] = q
        w = normal(q.view(shape)).flatten(1)
        active = ~done
        a = (q * w).sum(1)
        w = w - a.unsqueeze(1) * q
        for _ in range(2):
            w = w - torch.einsum("kb,kbn->bn", torch.einsum("kbn,bn->kb", basis[: k + 1], w),
                                 basis[: k + 1])
        b = w.norm(dim=1)
        alpha[:, k] = torch.where(active, a.double(), 0.0)
        beta[:, k] = torch.where(active, b.double(), 0.0)
        iterations += active.long()
        T = torch.diag_embed(alpha[:, : k + 1]) + torch.diag_embed(beta[:, :k], 1) \
            + torch.diag_embed(beta[:, :k], -1)
        evals, evecs = torch.linalg.eigh(T)
        th, s_new = evals[:, -1], evecs[:, :, -1]
        res = beta[:, k] * s_new[:, -1].abs() / th.clamp_min(torch.finfo(torch.float64).tiny)
        theta = torch.where(active, th, theta)
        residual = torch.where(active, res, residual)
        s = s_new if s is None else torch.where(active.unsqueeze(1), s_new,
                                                torch.nn.functional.pad(s, (0, 1)))
        invariant = beta[:, k] <= 1e3 * torch.finfo(q.dtype).eps * th.clamp_min(0)
        done = done | (residual <= tol) | invariant | (th <= 0)
        if bool(done.all()):
            break
        # Frozen inputs get a zero vector: their products cost nothing extra and change nothing.
        q = torch.where(done.unsqueeze(1), 0.0, w / b.clamp_min(torch.finfo(w.dtype).tiny).unsqueeze(1))
    steps = s.shape[1]
    vec = torch.einsum("bk,kbn->bn", s.to(q.dtype), basis[:steps])
    return theta, iterations, done, residual, _normalize(vec).view(shape)


def local_lipschitz(
    fn: Map,
    X: Tensor,
    *,
    method: Literal["lanczos", "power"] = "lanczos",
    tol: float = 1e-6,
    max_iter: int = 200,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    detailed: bool = False,
) -> Tensor | LipschitzResult:
    """Lemma 3.1 / App. E.1: ``||D_{X_b} fn||_2`` for every ``b`` of a ``(B, n, d)`` batch, matrix-free.

    ``fn`` maps ``(B, n, d)`` to ``(B, n', d')`` acting on each batch element separately. ``method``
    is ``"lanczos"`` (default) or the paper's ``"power"`` iteration, both on ``JᵀJ``; ``tol`` bounds
    the relative residual of the top eigenpair of ``JᵀJ`` and ``max_iter`` the number of products.
    Returns the values ``(B,)``, or a :class:`LipschitzResult` when ``detailed``. Inputs that did not
    converge raise a :class:`NotConvergedWarning` unless ``detailed`` (then see ``converged``).
    """
    check_tokens(X)
    if method not in ("lanczos", "power"):
        raise ValueError(f"method must be 'lanczos' or 'power'; got {method!r}")
    if not tol > 0 or max_iter < 1:
        raise ValueError(f"need tol > 0 and max_iter >= 1; got tol={tol}, max_iter={max_iter}")
    if dtype is not None:
        X = X.to(dtype)
    lin = linearize(fn, X)
    generator = torch.Generator(device=X.device).manual_seed(seed)
    u0 = torch.randn(X.shape, generator=generator, device=X.device, dtype=X.dtype)

    def normal(u: Tensor) -> Tensor:
        return lin.vjp(lin.jvp(u))

    solver = _lanczos if method == "lanczos" else _power
    theta, iterations, converged, residual, u = solver(normal, _normalize(u0), tol, max_iter)
    value = theta.clamp_min(0).sqrt().to(X.dtype)
    if not detailed:
        if not bool(converged.all()):
            bad = int((~converged).sum())
            warnings.warn(f"{bad} of {len(converged)} inputs did not converge in {max_iter} "
                          f"iterations (tol={tol}); pass detailed=True to inspect them",
                          NotConvergedWarning, stacklevel=2)
        return value
    Ju = lin.jvp(u)
    return LipschitzResult(value=value, iterations=iterations, converged=converged,
                           residual=residual, right_vector=u, left_vector=_normalize(Ju),
                           method=method)


def jacobian_matrix(fn: Map, X: Tensor) -> Tensor:
    """Dense Jacobians ``D_{X_b} fn`` in float64, shape ``(B, n' d', n d)``: ground truth for small inputs."""
    check_tokens(X)
    X = X.detach().double()
    blocks = []
    for x in X:
        J = torch.autograd.functional.jacobian(lambda z: fn(z.unsqueeze(0)).squeeze(0), x)
        blocks.append(J.reshape(-1, x.numel()))
    return torch.stack(blocks)


def exact_local_lipschitz(fn: Map, X: Tensor) -> Tensor:
    """Lemma 3.1: the exact ``||D_{X_b} fn||_2`` from the dense float64 SVD, shape ``(B,)``."""
    return torch.linalg.matrix_norm(jacobian_matrix(fn, X), ord=2)


def weighted_operator_norm(fn: Map, X: Tensor, weights: Tensor) -> Tensor:
    """Lemma C.5: ``||W^{1/2} D_X fn W^{-1/2}||_2`` with ``W = diag(w) ⊗ I``, float64, shape ``(B,)``.

    With ``fn`` the weighted self-attention of Def C.4, this is the local Lipschitz constant of
    mean-field attention at the measure ``sum_i w_i δ_{x_i}`` for the Wasserstein-2 distance.
    """
    J = jacobian_matrix(fn, X)
    B, n = X.shape[:2]
    w = torch.as_tensor(weights, dtype=torch.float64, device=J.device).expand(B, n)
    if bool((w <= 0).any()):
        raise ValueError("weights must be strictly positive")
    w = w / w.sum(1, keepdim=True)
    root_out = w.sqrt().repeat_interleave(J.shape[1] // n, dim=1)
    root_in = w.sqrt().repeat_interleave(J.shape[2] // n, dim=1)
    return torch.linalg.matrix_norm(root_out.unsqueeze(2) * J / root_in.unsqueeze(1), ord=2)
