"""What :func:`lipnb.local_lipschitz` checks of ``fn`` before it trusts a linearization: a well-formed finite
output, the same output twice (determinism), each input's output independent of the others and of the
batch's size, and the linearization's own output equal to ``fn(X)`` up to rounding."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..arguments import all_finite

__all__ = ["check_map", "check_output", "check_same_map", "relative_change"]

Map = Callable[[Tensor], Tensor]


def check_output(Y: object, X: Tensor) -> None:
    """``ValueError`` unless ``fn(X)`` is a finite ``(B, n', d')`` tensor with the batch size of ``X``, naming what
    it is instead: not a tensor (a module's tuple of outputs), of another rank, of another batch size (a map that
    depends on the batch it is given), or not finite."""
    if not isinstance(Y, Tensor):
        raise ValueError(f"fn must map (B, n, d) to a (B, n', d') tensor; it returned a {type(Y).__name__} (a module's "
                         "tuple of outputs? take the tensor meant, e.g. lambda X: module(X)[0])")
    if Y.dim() != 3:
        raise ValueError(f"fn must map (B, n, d) to a (B, n', d') tensor; it returned one of shape {tuple(Y.shape)} "
                         f"({Y.dim()}-D) for X of shape {tuple(X.shape)}")
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"fn must map (B, n, d) to (B, n', d') with the same B = {X.shape[0]}; it returned "
                         f"{tuple(Y.shape)}: it depends on the batch it is given (e.g. it closes over per-batch data), "
                         "and local_lipschitz needs a map that acts on each input alone")
    if not all_finite(Y):
        raise ValueError("fn returned NaN or inf at X: its local Lipschitz constant is undefined there")


def relative_change(Y: Tensor, Z: Tensor) -> float:
    """``max |Z - Y| / max |Y|`` in float64 (``inf`` for a shape mismatch)."""
    if Y.shape != Z.shape:
        return float("inf")
    scale = Y.double().abs().max().clamp_min(torch.finfo(torch.float64).tiny)
    return float((Z.double() - Y.double()).abs().max() / scale)


def _tolerance(*tensors: Tensor) -> float:
    """``√eps`` of the coarsest dtype: far above the rounding of the same arithmetic in another order (a batch
    of one, a closed form against the module), far below what dropout or a 1 % move of another input changes."""
    return max(torch.finfo(t.dtype).eps for t in tensors) ** 0.5


def _run(fn: Map, X: Tensor) -> Tensor:
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        Y = fn(X)
    check_output(Y, X)
    return Y


def check_map(fn: Map, X: Tensor, mixing: bool) -> Tensor:
    """``fn(X)`` after checking that ``fn`` is deterministic (two evaluations agree, any ``B``) and, with
    ``mixing`` and ``B ≥ 2``, that it acts on each input alone: moving input 0 by 1 % of its size leaves the
    other outputs unchanged, and ``fn(X[:1])`` is ``fn(X)[:1]`` (no dependence on the batch or its size).
    A ``ValueError`` names what failed. Costs two forward passes (four with ``mixing``, one of them on one input).
    """
    Y = _run(fn, X)
    again = _run(fn, X)
    change = relative_change(Y, again)
    if change > _tolerance(Y):
        raise ValueError(f"fn is not deterministic: two evaluations at the same X differ by {change:.1e} (relative;"
                         " e.g. dropout in training mode); put the model in eval() mode")
    if mixing and len(X) >= 2:
        moved = X.clone()
        noise = torch.randn(X[0].shape, generator=torch.Generator(device=X.device).manual_seed(1),
                            device=X.device, dtype=X.dtype)
        moved[0] += 0.01 * X[0].abs().max().clamp_min(1.0) * noise
        change = relative_change(Y[1:], _run(fn, moved)[1:])
        if change > _tolerance(Y):
            raise ValueError(f"fn mixes the inputs of a batch: moving input 0 changed the other outputs by "
                             f"{change:.1e} (relative); local_lipschitz needs a map that acts on each input alone")
        try:
            alone = _run(fn, X[:1])
        except (RuntimeError, ValueError, IndexError) as error:
            raise ValueError(f"fn depends on the batch it is given (it failed on the first input alone: {error});"
                             " local_lipschitz needs a map that acts on each input alone") from error
        change = relative_change(Y[:1], alone)
        if change > _tolerance(Y):
            raise ValueError(f"fn depends on the batch it is given: fn(X[:1]) differs from fn(X)[:1] by {change:.1e}"
                             " (relative), e.g. a map closing over per-batch data; local_lipschitz needs a map "
                             "that acts on each input alone")
    return Y


def check_same_map(linearized: Tensor, Y: Tensor, what: str, rounding: float = 0.0) -> None:
    """``ValueError`` when a linearization's output differs from ``fn``'s ``Y`` beyond rounding: then it
    linearizes another map than ``fn`` (e.g. a truncated closed form, or ``fn`` closing over per-batch data).

    Rounding: ``√eps`` of the coarser dtype (relative to the largest entry of ``Y``), or 8 times ``rounding``,
    the scatter observed between the same computation in float32 and float64, whichever is larger: a closed
    form and the module it stands for compute the same map in another order.
    """
    change = relative_change(Y, linearized)
    if change > max(_tolerance(Y, linearized), 8 * rounding):
        raise ValueError(f"{what} differs from fn's output by {change:.1e} (relative, beyond rounding): it is the "
                         "linearization of another map than fn")
