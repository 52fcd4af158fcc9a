"""Argument checks shared by lipnb's public functions: a bad argument is a ``ValueError`` or ``TypeError`` that
names it, raised before any computation, never a number or a traceback from inside torch."""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

__all__ = ["all_finite", "as_count", "as_radius", "as_real", "check_float", "check_matrix", "check_positive_int",
           "check_tokens"]


def _as_float64(x: object, name: str) -> Tensor:
    if isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype == torch.bool):
        raise TypeError(f"{name} must be a number or a tensor of numbers; got a boolean")
    if isinstance(x, Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must be real; got a complex tensor")
        return x.detach().to(torch.float64)
    if not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a number or a tensor; got {type(x).__name__}")
    return torch.tensor(float(x), dtype=torch.float64)


def as_real(x: float | Tensor, name: str) -> Tensor:
    """``x`` as float64, checked finite (an eigenvalue, a coefficient)."""
    value = _as_float64(x, name)
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite; got {x}")
    return value


def as_radius(R: float | Tensor, name: str = "R") -> Tensor:
    """``R`` as float64, checked finite and ``>= 0`` (a ball's radius)."""
    r = _as_float64(R, name)
    if not bool(torch.isfinite(r).all()):
        raise ValueError(f"{name} must be finite; got {R}")
    if bool((r < 0).any()):
        raise ValueError(f"{name} must be >= 0; got {R}")
    return r


def as_count(n: int | Tensor, name: str = "n", minimum: int = 1) -> Tensor:
    """``n`` as float64, checked to be whole numbers ``>= minimum`` (a number of tokens)."""
    v = _as_float64(n, name)
    if not bool(torch.isfinite(v).all()) or bool((v != v.round()).any()):
        raise ValueError(f"{name} must be a whole number; got {n}")
    if bool((v < minimum).any()):
        raise ValueError(f"{name} must be >= {minimum}; got {n}")
    return v


def check_positive_int(k: object, name: str, minimum: int = 1) -> int:
    """``k`` as a Python ``int >= minimum`` (a batch size, a dimension, a number of steps)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{name} must be an int; got {type(k).__name__}")
    if k < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {k}")
    return int(k)


def all_finite(X: Tensor) -> bool:
    """Whether every entry of ``X`` is finite: one sum (any NaN or inf makes it non-finite), confirmed entry by
    entry only when the sum is not finite, since finite entries can overflow it."""
    return bool(torch.isfinite(X.sum())) or bool(torch.isfinite(X).all())


def check_float(X: object, name: str) -> Tensor:
    """``X`` unchanged, checked to be a finite floating-point tensor (float32 or float64)."""
    if not isinstance(X, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(X).__name__}")
    if X.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64; got {X.dtype}")
    if not all_finite(X):
        raise ValueError(f"{name} contains NaN or inf")
    if not math.prod(X.shape):
        raise ValueError(f"{name} is empty (shape {tuple(X.shape)})")
    return X


def check_tokens(X: Tensor, name: str = "X") -> None:
    """Raise ``TypeError``/``ValueError`` unless ``X`` is a finite float ``(batch, n, d)`` tensor, ``n, d >= 1``."""
    if not isinstance(X, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
    if not X.is_floating_point():
        raise TypeError(f"{name} must hold floating-point tokens; got {X.dtype}")
    if X.dim() != 3:
        raise ValueError(f"{name} must have shape (batch, n, d); got shape {tuple(X.shape)}")
    if X.shape[0] < 1:
        raise ValueError(f"{name} has an empty batch (shape {tuple(X.shape)})")
    if X.shape[1] < 1:
        raise ValueError(f"{name} has n = {X.shape[1]} tokens; a sequence needs n >= 1")
    if X.shape[2] < 1:
        raise ValueError(f"{name} has token dimension d = 0")
    if not all_finite(X):
        raise ValueError(f"{name} contains NaN or inf")


def check_matrix(M: Tensor, name: str, rank: int) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``M`` is a finite tensor with ``rank`` dimensions (a weight)."""
    if not isinstance(M, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(M).__name__}")
    if M.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions; got shape {tuple(M.shape)}")
    if not bool(torch.isfinite(M).all()):
        raise ValueError(f"{name} contains NaN or inf")
