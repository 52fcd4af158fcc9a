"""Shared pytest configuration for the numerical tests of :mod:`lipnb`.

* Hypothesis runs a small, reproducible number of examples by default (profile ``lipnb``); set
  ``HYPOTHESIS_PROFILE=thorough`` for a longer randomised search.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from torch import Tensor

Map = Callable[[Tensor], Tensor]

# The "explain" phase traces lines with sys.settrace / sys.monitoring, which has crashed the interpreter
# (Fatal Python error: Aborted) while shrinking a failure in torch code; the other phases are kept.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
settings.register_profile(
    "lipnb",
    max_examples=30,
    phases=PHASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=300,
    phases=PHASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lipnb"))


def pytest_configure(config: pytest.Config) -> None:
    # torch.func.jvp registers its decompositions with torch.jit.script on first use (torch internals).
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script` is deprecated:DeprecationWarning")


@pytest.fixture
def gen() -> torch.Generator:
    """A freshly seeded CPU generator, so every test draws the same random problem each run."""
    return torch.Generator().manual_seed(1234)
