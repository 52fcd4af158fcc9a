"""Real layers as maps: BERT, GPT-2 and Llama (SmolLM2) loaded offline or from the Hub, their attention as
closed-form maps (:mod:`lipnb.models.maps`), heads and quantisation. Imports :mod:`lipnb.core` and the
utilities.

The names of :mod:`lipnb.models.maps` (``load``, ``attention_map``, ...) are re-exported here, so
``lipnb.models.load(...)`` reads as it always has."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from .maps import (
    HUB_MODELS,
    KINDS,
    MODEL_NAMES,
    MODULE_KINDS,
    OFFLINE_MODELS,
    SMOLLM2_GGUF,
    UNMASKED_TWIN,
    Family,
    LayerMap,
    MapKind,
    OfflineError,
    StopForward,
    attention_inputs,
    attention_map,
    capture_inputs,
    check_kind,
    check_map_arguments,
    check_model_name,
    family,
    forward_with_hooks,
    head_A,
    head_matrices,
    is_decoder,
    layer_module,
    load,
    load_shared,
    num_layers,
)

__all__ = [
    "HUB_MODELS",
    "KINDS",
    "MODEL_NAMES",
    "MODULE_KINDS",
    "OFFLINE_MODELS",
    "SMOLLM2_GGUF",
    "UNMASKED_TWIN",
    "Family",
    "LayerMap",
    "MapKind",
    "OfflineError",
    "StopForward",
    "attention_inputs",
    "attention_map",
    "capture_inputs",
    "check_kind",
    "check_map_arguments",
    "check_model_name",
    "family",
    "forward_with_hooks",
    "head_A",
    "head_matrices",
    "is_decoder",
    "layer_module",
    "load",
    "load_shared",
    "num_layers",
]

# Every module of this floor, found on disk: imported on first attribute access.
_LAZY = frozenset(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
