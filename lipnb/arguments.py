"""Argument checks shared by lipnb's public functions: a bad argument is a ``ValueError`` or ``TypeError`` that
names it, raised before any computation, never a number or a traceback from inside torch."""

from __future__ import annotations

import argparse
import json
import math
import numbers
import operator
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

__all__ = [
    "all_finite",
    "as_count",
    "as_paired_points",
    "as_points",
    "as_radius",
    "as_real",
    "check_bool",
    "check_broadcast",
    "check_choice",
    "check_device",
    "check_float",
    "check_grouped_table",
    "check_ids",
    "check_index",
    "check_input_dtype",
    "check_lengths",
    "check_level",
    "check_matrix",
    "check_positive_int",
    "check_real",
    "check_record",
    "check_record_file",
    "check_seed",
    "check_sequence",
    "check_token_ids",
    "check_tokens",
    "check_width",
    "check_writable_dir",
    "command_line_int",
]


def _check_values(X: Tensor, name: str) -> None:
    """``ValueError`` when ``X`` is on the meta device: it has a shape but no values to compute with."""
    if X.is_meta:
        raise ValueError(f"{name} is on the meta device: it has a shape but no values to compute with")


def _as_float64(x: object, name: str) -> Tensor:
    if isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype == torch.bool):
        raise TypeError(f"{name} must be a number or a tensor of numbers; got a boolean")
    if isinstance(x, Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must be real; got a complex tensor")
        _check_values(x, name)
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
    _check_values(X, name)
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
    _check_values(X, name)
    if not all_finite(X):
        raise ValueError(f"{name} contains NaN or inf")


def check_matrix(M: Tensor, name: str, rank: int) -> None:
    """Raise ``TypeError``/``ValueError`` unless ``M`` is a finite tensor with ``rank`` dimensions (a weight)."""
    if not isinstance(M, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(M).__name__}")
    if M.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions; got shape {tuple(M.shape)}")
    _check_values(M, name)
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
    check_ids(ids, vocab_size, name)
    return ids


def check_ids(ids: object, vocab: int, name: str) -> Tensor:
    """``ids`` (a tensor or a list of ints) as an int64 tensor of ids in ``0..vocab-1``: no float truncated, no
    negative id wrapping round to the end of a table. Shapes are the caller's to check."""
    if isinstance(ids, Tensor):
        _check_values(ids, name)
    try:
        tensor = torch.as_tensor(list(ids) if isinstance(ids, Iterator) else ids)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be integer ids (a tensor or a list of ints); got {_describe(ids)}") from None
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"{name} must hold integer ids; got {tensor.dtype}")
    if tensor.numel():
        low, high = int(tensor.min()), int(tensor.max())
        if low < 0 or high >= vocab:
            raise ValueError(f"{name} must lie in 0..{vocab - 1} (the vocabulary); got ids from {low} to {high}")
    return tensor.long()


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


def check_grouped_table(table: object, by: object, columns: Sequence[str], *, allow_empty: bool = False) -> tuple:
    """``(frame, by)`` of a table to fit group by group: a ``pandas.DataFrame`` or a ``ResultTable`` (its
    ``frame``), non-empty unless ``allow_empty``, holding every column of ``by`` (a list of names, never a string) and
    ``columns``, with no missing value in ``by`` (a group whose key is NaN would be dropped silently)."""
    frame = getattr(table, "frame", table)
    if not (hasattr(frame, "columns") and hasattr(frame, "groupby")):
        raise TypeError(f"table must be a pandas.DataFrame or a lipnb ResultTable; got {type(table).__name__}")
    by = check_sequence(by, "by")
    missing = [c for c in (*by, *columns) if c not in frame.columns]
    if missing:
        raise ValueError(f"table has no column {missing[0]!r} (columns: {list(frame.columns)})")
    if not len(frame) and not allow_empty:
        raise ValueError("table is empty: no rows to fit")
    gaps = [c for c in by if bool(frame[c].isna().any())]
    if gaps:
        raise ValueError(f"table's column {gaps[0]!r} has a missing value (NaN) in {int(frame[gaps[0]].isna().sum())} "
                         "rows: a group needs a key")
    return frame, by


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` as an ``int`` in ``0..2**64-1``, the seeds ``torch.manual_seed`` takes (numpy and 0-d torch integers
    accepted, ``True`` and ``1.0`` refused)."""
    value = check_positive_int(seed, name, minimum=0)
    if value >= 2**64:
        raise ValueError(f"{name} must be below 2**64 (torch's seeds are 64-bit); got {value}")
    return value


def check_real(x: object, name: str) -> float:
    """``x`` as a finite ``float``: one real number (numpy's and a 0-d tensor included), never a bool, a string, NaN
    or inf."""
    value = _as_float64(x, name)
    if value.dim():
        raise TypeError(f"{name} must be one number; got a tensor of shape {tuple(value.shape)}")
    if not bool(torch.isfinite(value)):
        raise ValueError(f"{name} must be a finite number; got {x}")
    return float(value)


def check_level(level: object, name: str = "level") -> float:
    """A confidence level as a ``float`` in ``(0, 1)`` (``0.95``; the string ``"0.95"`` is refused)."""
    value = check_real(level, name)
    if not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1); got {value}")
    return value


def as_points(values: object, name: str, *, positive: bool = False) -> Tensor:
    """``values`` (a tensor, a list, a range, a pandas column) as a flat float64 tensor of finite numbers, each
    ``> 0`` when ``positive`` (a log-log fit takes their logarithms)."""
    if isinstance(values, Tensor):
        _check_values(values, name)
    try:
        if isinstance(values, str | bytes):
            raise TypeError
        if callable(getattr(values, "to_numpy", None)):  # a pandas column, also one of a group (its index not 0..k)
            values = values.to_numpy(copy=True)
        points = torch.as_tensor(list(values) if isinstance(values, Iterator) else values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be numbers (a tensor or a list); got {_describe(values)}") from None
    points = points.flatten()
    if not bool(torch.isfinite(points).all()):
        raise ValueError(f"{name} must be finite; got NaN or inf (a log of a zero or negative value?)")
    if positive and bool((points <= 0).any()):
        raise ValueError(f"{name} must be positive (their logarithms are taken); got {float(points.min())}")
    return points


def as_paired_points(x: object, y: object, names: tuple[str, str] = ("x", "y"), *, positive: bool = False,
                     minimum: int = 1) -> tuple[Tensor, Tensor]:
    """``x`` and ``y`` by :func:`as_points`, checked to hold the same number (``>= minimum``) of points."""
    a, b = as_points(x, names[0], positive=positive), as_points(y, names[1], positive=positive)
    if len(a) != len(b) or len(a) < minimum:
        raise ValueError(f"{names[0]} and {names[1]} must hold the same number (>= {minimum}) of points; "
                         f"got {len(a)} and {len(b)}")
    return a, b


def check_broadcast(**named: Tensor) -> None:
    """``ValueError`` naming the arguments when their shapes do not broadcast together (3 radii against 4 lengths)."""
    try:
        torch.broadcast_shapes(*(t.shape for t in named.values()))
    except RuntimeError:
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in named.items())
        raise ValueError(f"{' and '.join(named)} must broadcast together; got shapes {shapes}") from None


def check_width(X: Tensor, d: int, owner: str, name: str = "X") -> None:
    """``ValueError`` unless the tokens of ``X`` have the width ``d`` that ``owner`` expects."""
    if X.shape[-1] != d:
        raise ValueError(f"{name} has tokens of d = {X.shape[-1]} but {owner} expects d = {d}")


def check_input_dtype(X: Tensor, dtype: torch.dtype, name: str = "X") -> None:
    """``ValueError`` when ``X``'s dtype cannot hold weights of ``dtype`` exactly (float16 or bfloat16 input to a
    float32 layer): every lipnb map computes in its input's dtype, so a narrower input would compute another map."""
    if torch.promote_types(X.dtype, dtype) != X.dtype:
        raise ValueError(f"{name} is {X.dtype} but the map's weights are {dtype}: a map computes in its input's dtype "
                        f"and would round its weights; cast {name} to {dtype}")


def check_device(device: object, name: str = "device") -> torch.device:
    """``device`` (a string or a ``torch.device``) as a ``torch.device`` that holds values on this machine:
    ``ValueError`` for a device torch does not know, was not built for or cannot reach here, and for ``"meta"``
    (shapes without values: a model moved there loses its weights)."""
    if not isinstance(device, str | torch.device):
        raise TypeError(f"{name} must be a string or a torch.device; got {type(device).__name__}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"{name} {device!r} is not a device torch knows (e.g. 'cpu', 'cuda', 'cuda:0')") from None
    if device.type == "meta":
        raise ValueError(f"{name} 'meta' holds shapes but no values (a model there has no weights); use 'cpu' or None")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name} {device} requested, but this machine has no CUDA GPU; use 'cpu' or None")
    try:
        torch.empty(0, device=device)
    except Exception as err:  # torch says so with an AssertionError, a RuntimeError, NotImplementedError, ImportError
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ValueError(f"{name} {device} cannot be used on this machine ({reason}); use 'cpu' or None") from None
    return device


def check_record(record: object, name: str, keys: Sequence[str]) -> dict:
    """``record`` if it is a dict holding each of ``keys`` (a recorded run, as read back from JSON), else
    ``TypeError``/``ValueError`` naming ``name``: an empty ``{}`` is not a record."""
    if not isinstance(record, dict):
        raise TypeError(f"{name} must be a record (a dict with {', '.join(map(repr, keys))}); got {_describe(record)}")
    missing = [key for key in keys if key not in record]
    if missing:
        raise ValueError(f"{name} has no {missing[0]!r}: it is not a recorded run (its keys: {sorted(record)})")
    return record


def check_record_file(path: object, name: str, keys: Sequence[str]) -> dict:
    """The JSON record at ``path``, checked by :func:`check_record`; ``ValueError`` naming ``name`` when the path is
    missing, a folder or not JSON."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{name} {path} is a folder, not a record file")
    if not path.is_file():
        raise ValueError(f"{name} {path} does not exist")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{name} {path} is not a JSON record ({err})") from None
    return check_record(record, f"{name} {path}", keys)


def command_line_int(minimum: int = 1) -> Callable[[str], int]:
    """An ``argparse`` ``type``: the text as an ``int >= minimum``; anything else is argparse's one-line error
    (exit status 2), never a traceback from later."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}; got {value}")
        return value

    return whole_number
