"""Run profiles: ``quick`` (offline stand-in models, small grids) and ``paper`` (Sec. 5's models and grids).

A :class:`Profile` holds every model name, grid and training setting the chapters read.

The profile is chosen by ``lipnb.profiles.set_profile(name)`` (one line at the top of a notebook),
else by the environment variable ``LIPNB_PROFILE``, else ``quick``. The choice only decides which models and
grids a chapter passes to the sweeps: no result and no cache key depends on it, and the functions that read a
profile's settings take it as an argument (``p``, checked by :func:`check_profile`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .arguments import check_bool, check_lengths, check_positive_int, check_seed, check_sequence

__all__ = ["PROFILES", "Profile", "check_profile", "default_device", "profile", "set_profile"]

_ENV_VAR = "LIPNB_PROFILE"


@dataclass(frozen=True)
class Profile:
    """Every setting of one run of the book: model names (for :func:`lipnb.models.load`) and grids.

    Part I (chapters 1-9) measures single layers on ``lengths`` x ``per_length`` Alice sequences. Part II
    (chapters 10-14, Sec. 5) measures every layer of ``encoder``, ``decoder`` and ``gpt2`` on
    ``text_per_length`` sequences per length of ``alice_lengths`` and ``ag_news_lengths``; ``jump_lengths``
    past the trained context; Lemma C.7's input at ``adversarial_lengths`` on every head of every layer
    (``every_adversarial_layer``) or of the first, middle and last layer; random GPT-2 from ``seeds``.
    SmolLM2 (chapter 24) runs ``smollm2_layers`` (``None``: every layer) on both texts' grids, every layer at the
    two lengths ``smollm2_pair``, and its middle layer at ``smollm2_long_lengths``.
    Part III's language models are a recorded run, not a profile's: their settings are the record's
    (:data:`lipnb.experiments.charlm_runs.CHARLM_SETTINGS` and ``CHARLM_RECORDS``, stored with the curves).
    """

    name: str
    encoder: str
    decoder: str
    gpt2: str
    lengths: tuple[int, ...]
    per_length: int
    alice_lengths: tuple[int, ...]
    ag_news_lengths: tuple[int, ...]
    text_per_length: int
    jump_lengths: tuple[int, ...]
    adversarial_lengths: tuple[int, ...]
    every_adversarial_layer: bool
    seeds: tuple[int, ...]
    smollm2_layers: tuple[int, ...] | None
    smollm2_pair: tuple[int, int]
    smollm2_long_lengths: tuple[int, ...]

    def __post_init__(self) -> None:
        """Every field checked (``TypeError``/``ValueError`` naming it) and every grid stored as a tuple of ints."""
        for field in ("name", "encoder", "decoder", "gpt2"):
            if not isinstance(getattr(self, field), str) or not getattr(self, field):
                raise TypeError(f"{field} must be a non-empty string; got {getattr(self, field)!r}")
        grids = {field: tuple(check_lengths(getattr(self, field), field)) for field in (
            "lengths", "alice_lengths", "ag_news_lengths", "jump_lengths", "adversarial_lengths", "smollm2_pair",
            "smollm2_long_lengths")}
        if len(grids["smollm2_pair"]) != 2:
            raise ValueError(f"smollm2_pair must hold two lengths; got {grids['smollm2_pair']}")
        seeds = tuple(check_seed(s, "each of seeds") for s in check_sequence(self.seeds, "seeds"))
        layers = None if self.smollm2_layers is None else tuple(
            check_positive_int(i, "each of smollm2_layers", 0) for i in check_sequence(self.smollm2_layers,
                                                                                        "smollm2_layers"))
        checked = {**grids, "seeds": seeds, "smollm2_layers": layers,
                   "per_length": check_positive_int(self.per_length, "per_length"),
                   "text_per_length": check_positive_int(self.text_per_length, "text_per_length"),
                   "every_adversarial_layer": check_bool(self.every_adversarial_layer, "every_adversarial_layer")}
        for field, value in checked.items():
            object.__setattr__(self, field, value)


PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        encoder="minilm",
        decoder="minilm-decoder",
        gpt2="gpt2-random",
        lengths=(8, 16, 32, 64, 128),
        per_length=3,
        alice_lengths=(4, 6, 8, 12, 16, 24, 32, 48, 64, 128),
        ag_news_lengths=(4, 6, 8, 12, 16, 24, 32, 48, 64, 128),
        text_per_length=4,
        jump_lengths=(64, 96, 128, 160, 192, 256, 384, 512),
        adversarial_lengths=(2, 4, 8, 16, 32, 64, 97),
        every_adversarial_layer=False,
        seeds=(0, 1, 2),
        smollm2_layers=(0, 15, 29),
        smollm2_pair=(16, 128),
        smollm2_long_lengths=(128, 256, 512),
    ),
    "paper": Profile(
        name="paper",
        encoder="bert-base-uncased",
        decoder="bert-base-uncased-decoder",
        gpt2="gpt2-random",  # Sec. 5 measures a randomly initialised GPT-2 (see real_text.PAPER)
        lengths=tuple(range(2, 513, 2)),
        per_length=10,
        alice_lengths=tuple(range(2, 100, 2)),
        ag_news_lengths=tuple(range(2, 513, 10)),
        text_per_length=10,
        jump_lengths=tuple(range(64, 513, 32)),
        adversarial_lengths=tuple(range(2, 100, 5)),
        every_adversarial_layer=True,
        seeds=(0, 1, 2, 3, 4),
        smollm2_layers=None,
        smollm2_pair=(16, 512),
        smollm2_long_lengths=tuple(range(128, 513, 32)),
    ),
}

_selected: str | None = None


def _lookup(name: str, source: str) -> Profile:
    """The profile called ``name``; ``ValueError`` naming ``source`` and the valid names otherwise."""
    if not isinstance(name, str) or name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (from {source}); valid profiles: {sorted(PROFILES)}")
    return PROFILES[name]


def check_profile(p: object, name: str = "p") -> Profile:
    """``p`` if it is a :class:`Profile` (e.g. ``PROFILES["quick"]``), else ``TypeError`` naming ``name``."""
    if not isinstance(p, Profile):
        raise TypeError(f"{name} must be a lipnb.profiles.Profile (e.g. lipnb.profiles.profile()); "
                        f"got {type(p).__name__}")
    return p


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
    return _lookup(os.environ.get(_ENV_VAR) or "quick", f"${_ENV_VAR}")


def default_device() -> torch.device:
    """``cuda`` when a GPU is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
