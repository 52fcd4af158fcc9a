"""The float64 evaluation of a float32 map, which certifies a float32 run of :func:`lipnb.local_lipschitz`.

A float32 run's residual is recomputed with a float64 product of ``fn``'s float64 linearization (the Jacobian of
``fn`` evaluated in float64 on its float32 parameters, which float64 holds exactly: the truth the certificate is
about). :func:`float64_candidates` lists where that evaluation may be: the map a ``float64_map()`` method names,
``fn`` itself where it runs in float64, or, for a map differentiated by autograd whose tensors are float32 (a
lambda closing over float32 weights, a module), ``fn`` run with every float32 tensor it touches cast to float64
(:func:`_promoted`).
:func:`float32_scatter` estimates float32's rounding of ``fn``'s output from float32 evaluations alone, so that the
check that the float64 evaluation is ``fn`` does not take its tolerance from the discrepancy it measures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from .linearization import Linearizable
from .map_checks import relative_change

__all__ = ["float32_scatter", "float64_candidates", "nudged"]

Map = Callable[[Tensor], Tensor]

# The perturbation of float32_scatter: every entry of the input moved by this many units in its last place.
SCATTER_ULPS = 4


class _NotPromotable(RuntimeError):
    """``fn`` writes into a float32 tensor in place: its float64 evaluation cannot be made by casting."""


def _wide(value: Any) -> Any:
    if isinstance(value, Tensor) and value.dtype == torch.float32:
        return value.double()
    return torch.float64 if value is torch.float32 else value


_IN_PLACE = {"__setitem__", *(f"__i{op}__" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                                      "matmul", "and", "or", "xor", "lshift", "rshift"))}


class _Float64(TorchFunctionMode):
    """Every torch function runs on float64 copies of its float32 tensors (and ``float32`` dtypes read as float64);
    an in-place write into a float32 tensor, or an ``out=`` of one, raises :class:`_NotPromotable`."""

    def __torch_function__(self, func: Callable, types: object, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "__get__":                                  # an attribute: no copy, a float32 dtype reads float64
            return _wide(func(*args, **kwargs)) if args else func(*args, **kwargs)
        target = kwargs.get("out", args[0] if args else None)
        in_place = (name.endswith("_") and not name.endswith("__")) or name in _IN_PLACE or "out" in kwargs
        if in_place and isinstance(target, Tensor) and target.dtype == torch.float32:
            raise _NotPromotable(f"fn writes into a float32 tensor in place ({name})")
        if func is Tensor.float:
            func = Tensor.double
        return func(*tree_map(_wide, args), **tree_map(_wide, kwargs))


def _promoted(fn: Map) -> Map:
    """``fn`` evaluated in float64: every float32 tensor it uses (its weights, constants it makes) cast to float64,
    exactly, as the operations run (a ``TorchFunctionMode``; torch's default dtype is float64 meanwhile, restored)."""
    def wide(X: Tensor) -> Tensor:
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            with _Float64():
                return fn(X)
        finally:
            torch.set_default_dtype(default)
    return wide


def float64_candidates(fn: Map) -> list[tuple[Map, bool]]:
    """The maps that may evaluate ``fn`` in float64, in the order to try them, each with whether it is
    :func:`_promoted`: the one a ``float64_map()`` method names (:class:`lipnb.models.LayerMap`); else ``fn`` itself
    (a closed form casts its parameters exactly), and for a map differentiated by autograd then :func:`_promoted`
    ``fn``. The first whose output at a float64 input is float64 is ``fn``'s float64 evaluation."""
    named = getattr(fn, "float64_map", None)
    if callable(named):
        return [(named(), False)]
    return [(fn, False)] if isinstance(fn, Linearizable) else [(fn, False), (_promoted(fn), True)]


def nudged(X: Tensor, seed: int = 2) -> Tensor:
    """``X`` with every entry moved by :data:`SCATTER_ULPS` units in its last place, up or down at random (seeded):
    a perturbation of the size of float32's rounding of the input, as the rounding of a forward pass acts."""
    signs = torch.randint(0, 2, X.shape, generator=torch.Generator(device=X.device).manual_seed(seed), device=X.device)
    return X * (1 + SCATTER_ULPS * torch.finfo(X.dtype).eps * (2 * signs - 1).to(X.dtype))


def float32_scatter(fn: Map, x: Tensor, Y: Tensor) -> float:
    """How far float32's rounding moves ``fn``'s output at ``x`` (``Y = fn(x)``), from float32 alone: the relative
    change of the output at :func:`nudged` ``x``. Rounding in the forward pass acts as such a perturbation of the
    input (backward error); the estimate never reads a float64 evaluation, so it can be the tolerance of the check
    that one is ``fn``."""
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        return relative_change(Y, fn(nudged(x)))
