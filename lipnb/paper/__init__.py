"""What the papers and their published code say and do: the published numbers with their source lines,
the published experiments' settings and their estimator, one home each. Imports the floors below."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

# Every module of this floor, found on disk: imported on first attribute access.
_LAZY = frozenset(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
