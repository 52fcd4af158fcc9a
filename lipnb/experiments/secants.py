"""Secants and difference quotients against local constants (Lemma 3.1, chapter *Self-attention and its Jacobian*):
the slope of a map over a segment beside the largest local constant on it, and the quotient along a direction."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from ..arguments import as_radius, check_positive_int, check_sequence, check_tokens
from ..core.lipschitz import local_lipschitz

__all__ = ["difference_quotients", "secant_ratios"]

Map = Callable[[Tensor], Tensor]


def _steps(values: Iterable[float] | Tensor, name: str) -> Tensor:
    """A non-empty 1-D float64 grid of steps ``> 0``."""
    grid = torch.as_tensor(check_sequence(values.tolist() if isinstance(values, Tensor) else values, name),
                           dtype=torch.float64)
    as_radius(grid, name)
    if bool((grid == 0).any()):
        raise ValueError(f"{name} must be > 0; got {grid.tolist()}")
    return grid


def _directions(X: Tensor, U: Tensor) -> Tensor:
    check_tokens(X)
    check_tokens(U, "U")
    if U.shape != X.shape:
        raise ValueError(f"U must have the shape of X, {tuple(X.shape)}; got {tuple(U.shape)}")
    return U.to(X.dtype) / U.flatten(1).norm(dim=1).view(-1, 1, 1)


def secant_ratios(fn: Map, X: Tensor, U: Tensor, lengths: Iterable[float] | Tensor, *, points: int = 41,
                  tol: float = 1e-6) -> Tensor:
    """Lemma 3.1: ``|f(Y) - f(X)| / |Y - X|`` over ``max_t Lip_{X + t(Y - X)}(f)`` for ``Y = X + s U/|U|``.

    For each input ``X[b]`` and each length ``s``, the local constant is taken at ``points`` equally spaced points
    of the segment (ends included), all segments in one batch of ``local_lipschitz`` at relative residual ``tol``.
    Returns ``(B, len(lengths))``, float64: by the lemma at most ``1`` up to the solver's ``tol``.
    """
    U, lengths = _directions(X, U), _steps(lengths, "lengths")
    points = check_positive_int(points, "points", 2)
    B, L = len(X), len(lengths)
    X0 = X.repeat_interleave(L, 0)
    X1 = X0 + lengths.repeat(B).view(-1, 1, 1).to(X.dtype) * U.repeat_interleave(L, 0)
    secant = (fn(X1) - fn(X0)).flatten(1).norm(dim=1) / (X1 - X0).flatten(1).norm(dim=1)
    t = torch.linspace(0, 1, points, dtype=X.dtype).view(1, -1, 1, 1)
    on_segment = (X0[:, None] + t * (X1 - X0)[:, None]).flatten(0, 1)
    suprema = local_lipschitz(fn, on_segment, tol=tol).view(B * L, points).amax(1)
    return (secant / suprema).double().view(B, L)


def difference_quotients(fn: Map, X: Tensor, U: Tensor, steps: Iterable[float] | Tensor) -> Tensor:
    """``|f(X + ηU/|U|) - f(X)| / η`` for every input of ``X`` and step ``η`` (one batched call): ``(B, len(steps))``.

    As ``η → 0`` it tends to ``|D_X f (U/|U|)|``, which is ``Lip_X(f)`` along the top right singular vector."""
    U, steps = _directions(X, U), _steps(steps, "steps")
    B, S = len(X), len(steps)
    moved = X.repeat_interleave(S, 0) + steps.repeat(B).view(-1, 1, 1).to(X.dtype) * U.repeat_interleave(S, 0)
    change = (fn(moved) - fn(X).repeat_interleave(S, 0)).flatten(1).norm(dim=1)
    return (change / steps.repeat(B).to(change.dtype)).double().view(B, S)
