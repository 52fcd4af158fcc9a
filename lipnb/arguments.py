"""Argument checks shared by lipnb's public functions: a bad argument is a ``ValueError`` or ``TypeError`` that
names it, raised before any computation, never a number or a traceback from inside torch."""

from __future__ import annotations

import math
import numbers
import operator
import os
import tempfile
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "all_finite",
    "as_count",
    "as_radius",
    "as_real",
    "check_bool",
    "check_choice",
    "check_float",
    "check_grouped_table",
    "check_index",
    "check_lengths",
    "check_matrix",
    "check_positive_int",
    "check_sequence",
    "check_token_ids",
    "check_tokens",
    "check_writable_dir",
]


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
    """``k`` as a Python ``int >= minimum`` (a batch size, a dimension, a number of steps); ``4.0`` and ``True`` are
    refused, numpy and 0-d torch integers accepted."""
    if isinstance(k, bool) or (isinstance(k, Tensor) and (k.dtype == torch.bool or k.dim())):
        raise TypeError(f"{name} must be an int; got {_describe(k)}")
    try:
        value = operator.index(k)
    except TypeError:
        raise TypeError(f"{name} must be an int; got {_describe(k)}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def _describe(x: object) -> str:
    """A short description of ``x`` for an error message: its type, and its value when it is short."""
    text = repr(x)
    return f"{type(x).__name__} {text}" if len(text) <= 40 else type(x).__name__


def check_index(k: object, name: str, size: int) -> int:
    """``k`` as an ``int`` in ``0..size-1`` (a layer, a head)."""
    k = check_positive_int(k, name, minimum=0)
    if k >= size:
        raise ValueError(f"{name} must be in 0..{size - 1}; got {k}")
    return k


def check_bool(x: object, name: str) -> bool:
    """``x`` as a ``bool``: ``True``/``False`` only (``0``, ``"yes"`` refused, so a flag is never guessed)."""
    if isinstance(x, bool) or type(x).__name__ == "bool_":  # numpy's bool, from a table
        return bool(x)
    raise TypeError(f"{name} must be True or False; got {_describe(x)}")


def check_choice(x: object, name: str, choices: Collection[object]) -> object:
    """``x`` if it is one of ``choices``, else ``ValueError`` naming ``name`` and the valid values."""
    if isinstance(x, str | int | float | type(None)) and x in choices:
        return x
    raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {_describe(x)}")


def check_sequence(items: object, name: str, *, allow_empty: bool = False) -> list:
    """``items`` as a list: a list, tuple, range or other iterable, never a string (whose letters are not items)
    nor a single number; non-empty unless ``allow_empty``."""
    scalar = isinstance(items, Tensor) and not items.dim()
    if isinstance(items, str | bytes) or not isinstance(items, Iterable) or scalar:
        raise TypeError(f"{name} must be a sequence (list, tuple, range); got {_describe(items)}")
    values = list(items)
    if not values and not allow_empty:
        raise ValueError(f"{name} is empty; it must hold at least one value")
    return values


def check_lengths(lengths: object, name: str = "lengths", minimum: int = 1,
                  maximum: int | None = None) -> list[int]:
    """A grid of sequence lengths as a list of distinct ``int``s in ``minimum..maximum``: non-empty, no ``4.7``
    turned into ``4``, no string."""
    values = [check_positive_int(n, f"each of {name}", minimum) for n in check_sequence(lengths, name)]
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must be distinct; got {values}")
    if maximum is not None and max(values) > maximum:
        raise ValueError(f"{name} must be <= {maximum} (the model's positions); got {max(values)}")
    return values


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


def check_token_ids(ids: object, vocab_size: int, max_positions: int | None, name: str = "input_ids") -> Tensor:
    """``ids`` unchanged, checked to be an integer ``(batch, n)`` tensor, ``n >= 1``, of ids in ``0..vocab_size-1``
    and ``n <= max_positions`` (``None``: no limit), so that no error comes from inside the model's embedding."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids; got {type(ids).__name__}")
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name} must hold integer token ids; got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, n); got shape {tuple(ids.shape)}")
    if not ids.shape[0] or not ids.shape[1]:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)})")
    if max_positions is not None and ids.shape[1] > max_positions:
        raise ValueError(f"{name} has n = {ids.shape[1]} tokens but the model has {max_positions} positions")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"{name} must be in 0..{vocab_size - 1} (the vocabulary); got ids from {low} to {high}")
    return ids


def check_writable_dir(path: Path, env: str) -> Path:
    """``path``, created if needed and checked writable (a file is written and removed), else ``ValueError``
    naming the environment variable ``env`` that chooses it: raised before a computation, not after."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test.")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(f"the folder {path} cannot be written ({err.strerror or err}); set {env} to a writable "
                         "folder") from None
    return path


def check_grouped_table(table: object, by: object, columns: Sequence[str]) -> tuple:
    """``(frame, by)`` of a table to fit group by group: a ``pandas.DataFrame`` or a ``ResultTable`` (its
    ``frame``), non-empty, holding every column of ``by`` (a list of names, never a string) and ``columns``."""
    frame = getattr(table, "frame", table)
    if not (hasattr(frame, "columns") and hasattr(frame, "groupby")):
        raise TypeError(f"table must be a pandas.DataFrame or a lipnb ResultTable; got {type(table).__name__}")
    by = check_sequence(by, "by")
    missing = [c for c in (*by, *columns) if c not in frame.columns]
    if missing:
        raise ValueError(f"table has no column {missing[0]!r} (columns: {list(frame.columns)})")
    if not len(frame):
        raise ValueError("table is empty: no rows to fit")
    return frame, by
