"""The book's experiments: the sweeps of Parts I-III with their statistics, the recorded runs (language
models, long contexts, benchmarks) and the verdicts of the results-at-a-glance page. The top floor."""

from __future__ import annotations

from ..lazy import lazy_modules

# Every module of this floor, found on disk, is imported on first attribute access.
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals())
