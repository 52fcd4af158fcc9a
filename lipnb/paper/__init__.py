"""What the papers and their published code say and do: the published numbers with their source lines,
the published experiments' settings and their estimator, one home each. Imports the floors below."""

from __future__ import annotations

from ..lazy import lazy_modules

# Every module of this floor, found on disk, is imported on first attribute access.
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals())
