"""lipnb.experiments.adversarial: the layers and radii of Sec. 5.2 a profile studies (the sweeps themselves run in
tests/experiments/test_real_text.py, beside the real-text sweep they share a grid with)."""

from __future__ import annotations

from dataclasses import replace

import torch

from lipnb import data, models
from lipnb.experiments.adversarial import adversarial_layers, adversarial_radii
from lipnb.profiles import PROFILES


def test_adversarial_layers_follow_the_profile() -> None:
    assert adversarial_layers(PROFILES["quick"]) == {"minilm": [0, 3, 5], "minilm-decoder": [3], "gpt2-random": [6]}
    every = replace(PROFILES["quick"], every_adversarial_layer=True)
    assert adversarial_layers(every) == {"minilm": list(range(6)), "minilm-decoder": list(range(6)),
                                         "gpt2-random": list(range(12))}


def test_adversarial_radii_are_the_mean_rms_norms_at_the_three_longest_lengths(alice: None) -> None:
    """``R_ℓ``: the root mean square token norm of each sequence entering layer ℓ, averaged over the sequences of
    the profile's three longest Alice lengths, recomputed here from the layer's inputs."""
    p = replace(PROFILES["quick"], alice_lengths=(3, 4, 5, 6), text_per_length=2)
    radii = adversarial_radii("minilm", p)
    model, tokenizer = models.load("minilm")
    sequences = data.token_sequences(data.alice_text(), tokenizer, [4, 5, 6], 2)
    for layer in (0, 5):
        rms = torch.cat([models.attention_inputs(model, layer, sequences[n]).double().square().sum(-1).mean(1).sqrt()
                         for n in (4, 5, 6)])
        assert abs(float(radii[layer]) - float(rms.mean())) <= 1e-6 * float(rms.mean())
    assert list(radii.index) == list(range(6))
