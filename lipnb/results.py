"""Results of the book's sweeps: a typed, tidy table with its provenance, a CSV cache, progress bars.

A sweep returns a :class:`ResultTable`: one row per measurement, columns of numbers or labels, and a
``provenance`` record (the sweep, its parameters, a hash of the lipnb source the sweep depends on, torch's
version: :mod:`lipnb.sources`). Tables are cached
as CSV (full float64 precision) beside a JSON file holding the provenance, the row count and the SHA-256 of the
CSV bytes, in :func:`cache_dir`; an entry is found only under the same sweep, parameters and source hash, so a
stale result is never used. The key holds nothing else: a sweep's parameters decide its result, and no global
(the profile a chapter selected, say) enters it; tables built from a profile record its name themselves.

Both files are written to unique temporary names and renamed into place, so concurrent writers of one
key (``pytest -n 2`` on a cold cache) never see each other's half-written files; and where the system has file
locks (POSIX), processes that need one missing entry at once compute it once: the first computes, the others wait
for it and read it (a wait is bounded, after which a process computes the entry itself). A read verifies the
provenance, the row count and the checksum; an entry that fails (truncated, garbage, a row missing, a
half-written JSON) is recomputed with a warning, never returned.

A CSV cell does not say whether ``1``, ``NA`` or an empty cell is a number, a gap or a label, so the JSON record
also names the table's columns and its label columns (every value a string), and a read keeps those as strings
(``""`` stays ``""``). A sweep's table is the one read back from the file it has just written, so a chapter sees
the same table, dtypes included, whether it ran the sweep or found it cached.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm

from .arguments import check_sequence, check_writable_dir
from .profiles import profile
from .sources import source_digest

try:
    import fcntl  # POSIX file locks: one process computes a missing cache entry, the others wait for it
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = [
    "ResultTable",
    "cache_dir",
    "cached_table",
    "code_version",
    "progress",
    "progress_bar",
    "user_cache_dir",
]

T = TypeVar("T")
_CACHE_ENV = "LIPNB_CACHE_DIR"
Column = Tensor | Sequence[float] | Sequence[int] | Sequence[str]


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/lipnb``, else ``~/.cache/lipnb``: where lipnb caches what it builds."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root).expanduser().absolute() / "lipnb"


def cache_dir() -> Path:
    """The results cache: ``$LIPNB_CACHE_DIR``, else ``results/`` in the user cache (never inside the package)."""
    return Path(os.environ.get(_CACHE_ENV) or user_cache_dir() / "results").expanduser().absolute()


def code_version(module: str | None = None) -> str:
    """A hash of the lipnb source ``module`` depends on (its import closure, paths and bytes: editing a module it
    does not import keeps the hash), or of all of lipnb's source without ``module``."""
    return source_digest(module=module)


def _as_column(name: str, values: Column) -> list | Tensor:
    if isinstance(values, Tensor) and values.dim() != 1:
        raise ValueError(f"column {name!r} must be 1-D, got shape {tuple(values.shape)}")
    if isinstance(values, Tensor):
        return values.detach().cpu()
    return check_sequence(values, f"column {name!r}", allow_empty=True)


@dataclass(frozen=True)
class ResultTable:
    """A tidy table of results (one row per measurement) and where it came from."""

    frame: pd.DataFrame
    provenance: Mapping[str, object]

    @classmethod
    def from_columns(cls, columns: Mapping[str, Column], provenance: Mapping[str, object]) -> ResultTable:
        """Build a table from equal-length 1-D columns (tensors, number or label lists)."""
        data = {name: _as_column(name, values) for name, values in columns.items()}
        lengths = {name: len(values) for name, values in data.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns differ in length: {lengths}")
        frame = pd.DataFrame({k: v.numpy() if isinstance(v, Tensor) else v for k, v in data.items()})
        return cls(frame, dict(provenance))

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self.frame.columns)

    def _require(self, *columns: str) -> None:
        """``KeyError`` naming the first of ``columns`` the table does not have."""
        for column in columns:
            if column not in self.frame:
                raise KeyError(f"no column {column!r}; the table has {self.columns}")

    def __getitem__(self, column: str) -> Tensor:
        """A numeric column as a float64 tensor (labels: use :attr:`frame`)."""
        self._require(column)
        values = self.frame[column]
        if not pd.api.types.is_numeric_dtype(values):
            raise TypeError(f"column {column!r} holds labels, not numbers: read it from .frame")
        return torch.tensor(values.to_numpy(dtype="float64"))

    def where(self, **equal: object) -> ResultTable:
        """The rows whose columns equal the given values, e.g. ``table.where(inputs="random")``."""
        self._require(*equal)
        keep = pd.Series(True, index=self.frame.index)
        for column, value in equal.items():
            keep &= self.frame[column] == value
        return ResultTable(self.frame[keep].reset_index(drop=True), self.provenance)

    def pivot(self, value: str, index: str, columns: str) -> Tensor:
        """``value`` laid out as a float64 matrix, rows by sorted ``index``, columns by sorted ``columns``."""
        self._require(value, index, columns)
        table = self.frame.pivot(index=index, columns=columns, values=value).sort_index().sort_index(axis=1)
        return torch.tensor(table.to_numpy(dtype="float64"))

    def _label_columns(self) -> list[str]:
        """The columns whose every value is a string (labels, ``""`` included), in order."""
        return [column for column in self.columns if not pd.api.types.is_numeric_dtype(self.frame[column])
                and all(isinstance(value, str) for value in self.frame[column])]

    def to_csv(self, path: Path) -> None:
        """Write the rows to ``path`` (full float64 precision) and ``path`` + ``.json``: provenance, rows, columns,
        label columns, float columns (``1.0`` is written ``1``: read back as a float), checksum."""
        data = self.frame.to_csv(index=False, float_format="%.17g").encode()
        floats = [c for c in self.columns if pd.api.types.is_float_dtype(self.frame[c])]
        record = {"provenance": dict(self.provenance), "rows": len(self.frame), "columns": self.columns,
                  "labels": self._label_columns(), "floats": floats, "sha256": hashlib.sha256(data).hexdigest()}
        _write_atomic(path, data)
        _write_atomic(path.with_suffix(".json"), json.dumps(record, indent=1, sort_keys=True, default=str).encode())

    @classmethod
    def read_csv(cls, path: Path | str) -> ResultTable:
        """Read a table written by :meth:`to_csv`; ``ValueError`` naming the defect if it is missing, a folder or
        fails verification."""
        path = Path(path)
        for part in (path, path.with_suffix(".json")):
            if not part.is_file():
                raise ValueError(f"{part.name} is {'a folder' if part.is_dir() else 'missing'}, not a table's file "
                                 f"(in {part.parent})")
        try:
            record = json.loads(path.with_suffix(".json").read_text())
            provenance, rows, checksum = record["provenance"], record["rows"], record["sha256"]
            columns, labels, floats = list(record["columns"]), set(record["labels"]), list(record["floats"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path.with_suffix('.json').name} is not a complete provenance record ({err})") from None
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != checksum:
            raise ValueError(f"{path.name} does not match the checksum in its provenance")
        # Label columns are read as strings with no gaps; elsewhere only an empty cell (how NaN was written) is one.
        # Parsed from the bytes just verified, not from the file again (which a concurrent writer may have replaced).
        dtypes = {**{column: "float64" for column in floats}, **{column: str for column in labels}}
        frame = pd.read_csv(io.BytesIO(data), dtype=dtypes, keep_default_na=False,
                            na_values={column: [""] for column in columns if column not in labels},
                            skip_blank_lines=False)
        if list(frame.columns) != columns:
            raise ValueError(f"{path.name} has the columns {list(frame.columns)}; its provenance says {columns}")
        if len(frame) != rows:
            raise ValueError(f"{path.name} has {len(frame)} rows; its provenance says {rows}")
        return cls(frame, provenance)


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a unique temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# How long a process waits for another that computes the same entry before computing it itself: longer than any
# sweep of the quick profile takes, so that a wait never ends in the same work done twice.
_LOCK_WAIT_S = 3600.0


@contextmanager
def _one_writer(path: Path, wait_s: float) -> Iterator[None]:
    """Hold ``path``'s lock (a hidden ``.lock`` file beside it) while computing its entry, waiting at most ``wait_s``
    for a process that holds it; without POSIX file locks (Windows), or after the wait, go on unlocked."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    locked = False
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
            else:
                locked = True
                break
        yield
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read_entry(path: Path, key: str) -> ResultTable | None:
    """The entry at ``path`` when it holds the sweep of ``key``; ``None`` when it is missing, or damaged or another
    sweep's (with a warning)."""
    if not path.exists():
        return None
    try:
        table = ResultTable.read_csv(path)
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        warnings.warn(f"results cache: {path} is damaged ({err}); recomputing it", RuntimeWarning, stacklevel=3)
        return None
    if json.dumps(table.provenance, sort_keys=True, default=str) == key:
        return table
    warnings.warn(f"results cache: {path} holds another sweep's provenance; recomputing it", RuntimeWarning,
                  stacklevel=3)
    return None


def _stamp(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def cached_table(name: str, params: Mapping[str, object], compute: Callable[[], Mapping[str, Column]]) -> ResultTable:
    """The table of sweep ``name`` at ``params``: read from the cache, or ``compute()``d (columns) and stored.

    A damaged cache entry (see the module) is recomputed and overwritten, with a warning naming the defect. Before
    any work, an unknown ``$LIPNB_PROFILE`` is refused, and so is an entry whose file a folder has taken (it could
    not be stored); before ``compute()`` runs, the cache folder is checked writable (``ValueError`` naming
    ``$LIPNB_CACHE_DIR``), and an empty result is refused rather than stored.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"name must be a non-empty word of letters, digits, _ and - (a file name); got {name!r}")
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of the sweep's parameters; got {type(params).__name__}")
    if not callable(compute):
        raise TypeError(f"compute must be a callable returning the columns; got {type(compute).__name__}")
    profile()   # an unknown $LIPNB_PROFILE is refused before any sweep, cached or not
    # The code the sweep runs: the import closure of the module that defines ``compute`` (all of lipnb for a
    # ``compute`` defined elsewhere).
    module = getattr(compute, "__module__", None) or ""
    code = code_version(module if module.split(".")[0] == "lipnb" else None)
    provenance = {"sweep": name, "params": dict(params), "code": code, "torch": torch.__version__}
    key = json.dumps(provenance, sort_keys=True, default=str)
    path = cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.csv"
    taken = [p for p in (path, path.with_suffix(".json")) if p.is_dir()]
    if taken:
        raise ValueError(f"results cache: {taken[0]} is a folder where the entry's file goes; remove it (or set "
                         f"{_CACHE_ENV} to another folder)")
    seen = _stamp(path)
    table = _read_entry(path, key)
    if table is not None:
        return table
    check_writable_dir(path.parent, _CACHE_ENV)
    with _one_writer(path, _LOCK_WAIT_S):
        # another process may have stored the entry while this one waited for the lock
        if _stamp(path) != seen and (table := _read_entry(path, key)) is not None:
            return table
        table = ResultTable.from_columns(compute(), json.loads(key))
        if not len(table):
            raise ValueError(f"sweep {name!r} produced an empty table (parameters {dict(params)}); nothing was "
                             "cached")
        table.to_csv(path)
    return ResultTable.read_csv(path)


def progress_bar(**options) -> tqdm:
    """A text progress bar on the process's own stderr, never in a notebook cell's output.

    It is drawn when that stderr is a terminal (a script run by hand), or always with ``LIPNB_PROGRESS=1``;
    never with ``LIPNB_PROGRESS=0``. Inside a Jupyter kernel ``sys.__stderr__`` is the kernel's log, not
    the cell's output, so no bar is stored in a notebook or compared by nbval, whatever the environment.
    """
    stream = sys.__stderr__
    setting = os.environ.get("LIPNB_PROGRESS", "auto")
    shown = stream is not None and (setting == "1" or (setting != "0" and stream.isatty()))
    return tqdm(file=stream, disable=not shown, **options)


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` under a :func:`progress_bar` that disappears when done."""
    if not isinstance(items, Iterable):
        raise TypeError(f"items must be iterable; got {type(items).__name__}")
    return iter(progress_bar(iterable=items, desc=desc, total=total, leave=False))
