"""Numbers in the prose: :func:`state` glues a computed value under a name that ``{glue:text}`name``` prints, and
:func:`read_states` reads back the values a stored notebook glued. Outside a notebook gluing is skipped."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .numbers import as_written

__all__ = ["read_states", "state"]


def _glue(name: str, value: object) -> None:
    if not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"glue name {name!r} must be non-empty letters, digits, '_' or '-'")
    try:
        from myst_nb import glue
    except ImportError:
        return
    glue(name, value, display=False)


def state(name: str, value: float | int | str, fmt: str = ".3g") -> str:
    """Glue ``value`` formatted with ``fmt`` under ``name`` for ``{glue:text}`name``` and return the text (its
    e-notation written as powers of ten: "3 × 10⁻⁷")."""
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()  # a 0-d tensor or numpy scalar
    if isinstance(value, bool) or not isinstance(value, (float, int, str)):
        raise TypeError(f"{name}: state a float, an int or a str, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}: refusing to state a non-finite number ({value})")
    text = as_written(value if isinstance(value, str) else format(value, fmt))
    _glue(name, text)
    return text


def read_states(path: Path) -> dict[str, str]:
    """The values a stored notebook stated with :func:`state`: ``{name: text}``."""
    states = {}
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            text = out.get("data", {}).get("application/papermill.record/text/plain")
            if name and text is not None:
                states[name] = text.strip("'\"")
    return states
