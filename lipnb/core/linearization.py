"""What a linearization ``J = D_X f`` at a batch ``X`` is to the solvers: one protocol, its capabilities declared.

:class:`Linearized` is everything :mod:`lipnb.core.krylov` and :func:`lipnb.local_lipschitz` use: the
output ``f(X)``, the products ``J u`` and ``Jᵀ v``, ``select`` (the linearization at some inputs of the
batch only) and two declared capabilities, ``casts`` (``to(dtype)`` runs the products in another dtype,
which a low-precision presolve needs) and ``shrinks`` (when a solver should ``select`` the inputs still
running: ``1`` for a cheap slice, ``0.5`` for a ``select`` that re-linearizes, ``0`` for none).

:class:`ClosedForm` is the base of every closed-form linearization (Lemma C.2 and the maps built on it):
a subclass names the tensors it stores per input (``batched``), the tensors the whole batch shares
(``parameters``) and the closed forms it is made of (``parts``); ``select`` and ``to`` follow from them.
"""

from __future__ import annotations

import copy
from typing import ClassVar, Protocol, TypeVar

import torch
from torch import Tensor

__all__ = ["ClosedForm", "Linearized"]

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
