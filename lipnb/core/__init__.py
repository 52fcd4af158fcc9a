"""The numerical core: maps, Jacobians, solvers, the estimator, bounds and inputs (Castin et al., Secs. 2-4;
Kim et al., Sec. 3). Imports only the top-level utilities of :mod:`lipnb`."""

from __future__ import annotations

from ..lazy import lazy_modules

# Every module of this floor, found on disk, is imported on first attribute access.
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals())
