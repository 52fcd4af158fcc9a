"""Modules imported on first use: what lets ``import lipnb`` stay light while every module is an attribute."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

__all__ = ["lazy_modules"]


def lazy_modules(package: str, init_file: str, namespace: dict[str, object]
                 ) -> tuple[Callable[[str], ModuleType], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package`` whose ``__init__.py`` is ``init_file``: every
    module and subpackage found beside it on disk (so none is left out) is imported on first attribute access."""
    here = Path(init_file).parent
    names = frozenset(p.stem for p in here.glob("*.py") if not p.stem.startswith("_")) | frozenset(
        p.parent.name for p in here.glob("*/__init__.py"))

    def module_getattr(name: str) -> ModuleType:
        if name in names:
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def module_dir() -> list[str]:
        return sorted(set(namespace) | names)

    return module_getattr, module_dir
