"""The book's experiments: the sweeps of Parts I-III with their statistics, the recorded runs (language
models, long contexts, benchmarks) and the verdicts of the results-at-a-glance page. The top floor."""

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
