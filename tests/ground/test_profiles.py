"""Run profiles: quick by default, paper on request (set_profile beats $LIPNB_PROFILE)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lipnb import profiles


@pytest.fixture(autouse=True)
def fresh_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no set_profile call and no $LIPNB_PROFILE."""
    monkeypatch.setattr(profiles, "_selected", None)
    monkeypatch.delenv(profiles._ENV_VAR, raising=False)


def test_quick_is_the_offline_default() -> None:
    p = profiles.profile()
    assert p == profiles.PROFILES["quick"]
    assert (p.name, p.encoder, p.decoder, p.gpt2) == ("quick", "minilm", "minilm-decoder", "gpt2-random")
    assert (p.lengths, p.per_length) == ((8, 16, 32, 64, 128), 3)
    assert p.alice_lengths == (4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
    assert (p.text_per_length, p.every_adversarial_layer) == (4, False)
    assert p.ag_news_lengths == p.alice_lengths
    assert (p.smollm2_layers, p.smollm2_pair, p.smollm2_long_lengths) == ((0, 15, 29), (16, 128), (128, 256, 512))


def test_paper_profile_uses_the_hub_models_and_full_grid() -> None:
    p = profiles.PROFILES["paper"]
    assert (p.encoder, p.decoder, p.gpt2) == ("bert-base-uncased", "bert-base-uncased-decoder", "gpt2-random")
    assert p.lengths == tuple(range(2, 513, 2)) and len(p.lengths) == 256
    assert (p.per_length, p.text_per_length, p.every_adversarial_layer) == (10, 10, True)
    assert max(p.ag_news_lengths) <= 512 and p.alice_lengths == tuple(range(2, 100, 2))
    assert p.smollm2_layers is None and max(p.smollm2_long_lengths) == max(p.smollm2_pair) == 512


def test_profile_names_are_models_lipnb_can_load() -> None:
    from lipnb.models import MODEL_NAMES

    for p in profiles.PROFILES.values():
        assert {p.encoder, p.decoder, p.gpt2} <= set(MODEL_NAMES)


def test_environment_variable_selects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profiles._ENV_VAR, "paper")
    assert profiles.profile().name == "paper"
    monkeypatch.setenv(profiles._ENV_VAR, "")
    assert profiles.profile().name == "quick"


def test_set_profile_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profiles._ENV_VAR, "quick")
    assert profiles.set_profile("paper").name == "paper"
    assert profiles.profile().name == "paper"


def test_invalid_names_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown profile 'fast'.*'paper', 'quick'"):
        profiles.set_profile("fast")
    assert profiles.profile().name == "quick"
    monkeypatch.setenv(profiles._ENV_VAR, "Paper")
    with pytest.raises(ValueError, match=r"\$LIPNB_PROFILE"):
        profiles.profile()


def test_profiles_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        profiles.profile().per_length = 100  # type: ignore[misc]


def test_default_device() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert profiles.default_device() == torch.device(expected)
