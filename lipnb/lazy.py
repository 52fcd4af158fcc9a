"""Modules and published names imported on first use: what lets ``import lipnb`` stay light while every module,
and every name a floor publishes, is an attribute."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["lazy_modules", "published_names"]


def published_names(package: str, published: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """``{name: module}`` for a floor's ``published`` map ``{module: names}``; a name published twice is an error."""
    owner: dict[str, str] = {}
    for module, names in published.items():
        for name in names:
            if name in owner:
                raise ValueError(f"{package}: {name!r} is published by both .{owner[name]} and .{module}")
            owner[name] = module
    return owner


def lazy_modules(package: str, init_file: str, namespace: dict[str, object],
                 published: Mapping[str, Sequence[str]] | None = None
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package`` whose ``__init__.py`` is ``init_file``: every
    module and subpackage found beside it on disk (so none is left out) is imported on first attribute access,
    and so is each name of ``published`` (``{module: names}``: what the floor publishes, one module each)."""
    here = Path(init_file).parent
    names = frozenset(p.stem for p in here.glob("*.py") if not p.stem.startswith("_")) | frozenset(
        p.parent.name for p in here.glob("*/__init__.py"))
    owner = published_names(package, published or {})
    if shadowed := sorted(set(owner) & names):
        raise ValueError(f"{package}: published names {shadowed} would hide the modules of the same name")

    def module_getattr(name: str) -> object:
        if name in owner:
            # Resolved on every access, never bound here: the package holds no second reference that could go
            # stale when the module's attribute is replaced (a test's mutation, a reload).
            return getattr(importlib.import_module(f".{owner[name]}", package), name)
        if name in names:
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def module_dir() -> list[str]:
        return sorted(set(namespace) | names | set(owner))

    return module_getattr, module_dir
