"""Sweeps behind the book's figures: each a function with a progress bar and an on-disk results cache.

The cache lives in ``LIPNB_CACHE_DIR`` (default ``.cache/lipnb`` in the working directory's repository
root); an entry is keyed by the sweep's name, its parameters and the lipnb version, and is never
committed, so a fresh clone (and CI) recomputes everything it shows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import torch
from tqdm.auto import tqdm

__all__ = ["cache_dir", "cached", "progress"]

T = TypeVar("T")


def cache_dir() -> Path:
    """The results cache folder: ``LIPNB_CACHE_DIR`` or ``.cache/lipnb`` next to the lipnb package."""
    default = Path(__file__).resolve().parents[1] / ".cache" / "lipnb"
    return Path(os.environ.get("LIPNB_CACHE_DIR", default))


def cached(name: str, params: dict, compute: Callable[[], T]) -> T:
    """Return ``compute()``, stored under ``name`` and a hash of ``params``; reuse a stored result."""
    from . import __version__

    key = json.dumps({"name": name, "params": params, "version": __version__}, sort_keys=True, default=str)
    path = cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(result, tmp)
    tmp.replace(path)
    return result


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """A tqdm progress bar that stays quiet when ``LIPNB_PROGRESS=0`` (as in CI logs)."""
    disable = os.environ.get("LIPNB_PROGRESS", "1") == "0"
    return iter(tqdm(items, desc=desc, total=total, disable=disable, leave=False))
