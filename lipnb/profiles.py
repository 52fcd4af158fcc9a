"""Run profiles: ``quick`` (offline stand-in models, small grids) and ``paper`` (Sec. 5's models and grids).

The profile is chosen by ``lipnb.profiles.set_profile(name)`` (one line at the top of a notebook),
else by the environment variable ``LIPNB_PROFILE``, else ``quick``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = ["ENV_VAR", "PROFILES", "Profile", "default_device", "profile", "set_profile"]

ENV_VAR = "LIPNB_PROFILE"


@dataclass(frozen=True)
class Profile:
    """The models (names for :func:`lipnb.models.load`) and the grids of one run of the book."""

    name: str
    encoder: str
    decoder: str
    gpt2: str
    lengths: tuple[int, ...]
    per_length: int
    batch_max: int


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        encoder="minilm",
        decoder="minilm-decoder",
        gpt2="gpt2-random",
        lengths=(8, 16, 32, 64, 128),
        per_length=3,
        batch_max=8,
    ),
    "paper": Profile(
        name="paper",
        encoder="bert-base-uncased",
        decoder="bert-base-uncased-decoder",
        gpt2="gpt2",
        lengths=tuple(range(2, 513, 2)),
        per_length=10,
        batch_max=64,
    ),
}

_selected: str | None = None


def _lookup(name: str, source: str) -> Profile:
    """The profile called ``name``; ``ValueError`` naming ``source`` and the valid names otherwise."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (from {source}); valid profiles: {sorted(PROFILES)}")
    return PROFILES[name]


def set_profile(name: str) -> Profile:
    """Select the profile for this process (overrides ``LIPNB_PROFILE``) and return it."""
    global _selected
    chosen = _lookup(name, "set_profile")
    _selected = name
    return chosen


def profile() -> Profile:
    """The active profile: :func:`set_profile`'s, else a non-empty ``$LIPNB_PROFILE``, else ``quick``."""
    if _selected is not None:
        return PROFILES[_selected]
    return _lookup(os.environ.get(ENV_VAR) or "quick", f"${ENV_VAR}")


def default_device() -> torch.device:
    """``cuda`` when a GPU is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
