"""Real layers as maps: BERT, GPT-2 and Llama (SmolLM2) loaded offline or from the Hub, their attention as
closed-form maps (:mod:`lipnb.models.maps`), heads and quantisation. Imports :mod:`lipnb.core` and the
utilities.

The names of :mod:`lipnb.models.maps` (``load``, ``attention_map``, ...) are re-exported here, so
``lipnb.models.load(...)`` reads as it always has."""

from __future__ import annotations

from ..lazy import lazy_modules
from .maps import *  # noqa: F403  (the names of maps, listed once: maps.__all__)
from .maps import __all__ as __all__

# Every module of this floor, found on disk, is imported on first attribute access.
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals())
