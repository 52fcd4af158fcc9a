"""What a linearization ``J = D_X f`` at a batch ``X`` is to the solvers: one protocol, its capabilities declared.

:class:`Linearized` is everything :mod:`lipnb.core.krylov` and :func:`lipnb.local_lipschitz` use: the
output ``f(X)``, the products ``J u`` and ``Jᵀ v``, ``select`` (the linearization at some inputs of the
batch only) and two declared capabilities, ``casts`` (``to(dtype)`` runs the products in another dtype,
which a low-precision presolve needs) and ``shrinks`` (when a solver should ``select`` the inputs still
running: ``1`` for a cheap slice, ``0.5`` for a ``select`` that re-linearizes, ``0`` for none).

:class:`ClosedForm` is the base of every closed-form linearization (Lemma C.2 and the maps built on it):
a subclass names the tensors it stores per input (``batched``), the tensors the whole batch shares
(``parameters``) and the closed forms it is made of (``parts``); ``select`` and ``to`` follow from them.

:func:`linearize` builds the linearization of any map: the map's own closed form when it is
:class:`Linearizable`, else a :class:`Linearization` whose products come from one recorded autograd graph.
:func:`linearization_bytes` measures what one input's linearization keeps in memory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from .map_checks import check_output, check_same_map

__all__ = ["ClosedForm", "Linearizable", "Linearization", "Linearized", "linearization_bytes", "linearize"]

Map = Callable[[Tensor], Tensor]

C = TypeVar("C", bound="ClosedForm")


class Linearized(Protocol):
    """What the solvers need of a linearization: its output, the two products, ``select`` and what it can do."""

    output: Tensor
    casts: bool
    shrinks: float

    def jvp(self, u: Tensor) -> Tensor: ...

    def vjp(self, v: Tensor) -> Tensor: ...

    def select(self, index: Tensor) -> Linearized: ...


class ClosedForm:
    """Base of the closed-form linearizations: ``select`` and ``to`` derived from the declared fields.

    ``output`` is always batched. ``select(index)`` slices every ``batched`` tensor and selects every part;
    ``to(dtype)`` casts the batched tensors, the ``parameters`` and every part. A subclass whose shared state
    is not a tensor (factors of a layer, a scratch buffer) extends :meth:`_selected` or :meth:`_cast`.
    """

    batched: ClassVar[tuple[str, ...]] = ()
    parameters: ClassVar[tuple[str, ...]] = ()
    parts: ClassVar[tuple[str, ...]] = ()
    casts: ClassVar[bool] = True
    shrinks: ClassVar[float] = 1.0
    output: Tensor

    def _copy(self: C, changes: dict[str, object]) -> C:
        new = copy.copy(self)
        for name, value in changes.items():
            object.__setattr__(new, name, value)      # frozen dataclasses too
        return new

    def _selected(self: C, index: Tensor) -> C:
        """The hook of :meth:`select`: the copy with the declared fields sliced."""
        changes: dict[str, object] = {name: getattr(self, name)[index] for name in (*self.batched, "output")}
        changes |= {name: getattr(self, name).select(index) for name in self.parts}
        return self._copy(changes)

    def _cast(self: C, dtype: torch.dtype) -> C:
        """The hook of :meth:`to`: the copy with the declared fields in ``dtype``."""
        names = (*self.batched, *self.parameters, "output")
        changes: dict[str, object] = {name: getattr(self, name).to(dtype) for name in names}
        changes |= {name: getattr(self, name).to(dtype) for name in self.parts}
        return self._copy(changes)

    def select(self: C, index: Tensor) -> C:
        """The linearization at the inputs ``index`` of the batch only."""
        return self._selected(index)

    def to(self: C, dtype: torch.dtype) -> C:
        """The same linearization with its stored tensors (and so its products) in ``dtype``."""
        if not self.casts:
            raise TypeError(f"{type(self).__name__} does not run its products in another dtype")
        return self._cast(dtype)


@dataclass(frozen=True)
class Linearization:
    """``J = D_X f`` at a fixed batch ``X``: ``jvp(u) = J u`` and ``vjp(v) = Jᵀ v``, batched.

    ``select(index)``, when given, returns the linearization at the inputs ``index`` only; it lets
    :func:`lipnb.local_lipschitz` stop spending products on inputs that have converged. Its capabilities
    (:class:`Linearized`): no ``to``; a ``select`` re-linearizes, so it is worth
    it once half the batch has finished.
    """

    output: Tensor
    jvp: Map
    vjp: Map
    select: Callable[[Tensor], Linearization] | None = None
    casts: ClassVar[bool] = False

    @property
    def shrinks(self) -> float:
        return 0.0 if self.select is None else 0.5


@runtime_checkable
class Linearizable(Protocol):
    """A map ``fn`` that knows its own Jacobian: ``fn.linearize(X)`` returns an object with ``output``,
    ``jvp`` and ``vjp`` (optionally ``select``) like :class:`Linearization`, e.g.
    :class:`lipnb.core.jacobian.MultiHeadMap` (Lemma C.2 in closed form)."""

    def __call__(self, X: Tensor) -> Tensor: ...

    def linearize(self, X: Tensor) -> Linearization: ...


def linearize(fn: Map, X: Tensor) -> Linearization:
    """Record one forward pass of ``fn`` at ``X`` and return reusable JVP and VJP closures.

    A :class:`Linearizable` ``fn`` supplies its own (closed-form) products. Otherwise the JVP is the
    transpose of the VJP, obtained by differentiating the VJP with respect to its (dummy) cotangent,
    so no later product re-runs the forward pass; ``select`` re-linearizes on a sub-batch.
    """
    if isinstance(fn, Linearizable):
        lin = fn.linearize(X)
        check_output(lin.output, X)
        return lin

    def select(index: Tensor) -> Linearization:
        sub = linearize(fn, X[index])
        check_same_map(sub.output, Y.detach()[index], "fn re-linearized on a sub-batch (its output there)")
        return sub

    Xg = X.detach().requires_grad_(True)
    # The fused attention kernels have no double backward: record the forward with the math kernel.
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH):
        Y = fn(Xg)
        check_output(Y, X)
        G = torch.zeros_like(Y, requires_grad=True)
        (JtG,) = torch.autograd.grad(Y, Xg, G, create_graph=True, allow_unused=True) if Y.requires_grad \
            else (None,)
        if JtG is None or not JtG.requires_grad:
            # Y does not depend on X (or depends on it affinely with a zero slope): J = 0.
            zero_in, zero_out = torch.zeros_like(X), torch.zeros_like(Y)
            return Linearization(Y.detach(), lambda u: zero_out[: len(u)], lambda v: zero_in[: len(v)], select)

    def jvp(u: Tensor) -> Tensor:
        with torch.enable_grad():
            (Ju,) = torch.autograd.grad(JtG, G, u, retain_graph=True, allow_unused=True)
        return torch.zeros_like(Y) if Ju is None else Ju

    def vjp(v: Tensor) -> Tensor:
        with torch.enable_grad():
            (Jtv,) = torch.autograd.grad(Y, Xg, v, retain_graph=True, allow_unused=True)
        return torch.zeros_like(X) if Jtv is None else Jtv

    return Linearization(Y.detach(), jvp, vjp, select)


def linearization_bytes(fn: Map, x: Tensor) -> int:
    """Bytes kept by the linearization of ``fn`` at one input ``x`` ``(1, n, d)``: saved autograd tensors
    and the tensors of a closed-form linearization, each storage once. Every storage seen is held until the
    count is done, so no address is reused by another within one measurement (which would make the count
    depend on the allocator's state); a saved tensor that autograd frees early is counted too."""
    storages: dict[int, torch.UntypedStorage] = {}

    def pack(t: Tensor) -> Tensor:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage()
        return t

    def visit(obj: object) -> None:          # a closed form may hold other linearizations (sub-layers)
        for value in vars(obj).values():
            if isinstance(value, Tensor):
                pack(value)
            elif isinstance(value, ClosedForm):
                visit(value)

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lin = linearize(fn, x)
    visit(lin)
    return sum(storage.nbytes() for storage in storages.values())
