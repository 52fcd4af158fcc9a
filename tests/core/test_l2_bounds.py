"""Theorem 3.2 of Kim et al. (2021): the Lambert-W term and the bounds against exact local constants."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from lipnb import exact_local_lipschitz
from lipnb.core.l2_bounds import (
    exact_local_lipschitz_inf,
    phi_inverse,
    softmax_distance_sum,
    theorem_3_2_inf,
    theorem_3_2_two,
    theorem_3_2_two_as_printed,
)
from lipnb.core.l2_self_attention import L2AttentionMap, L2Heads, random_l2_heads
from lipnb.experiments.l2_tightness import maximize_l2_lipschitz, proof_start


@pytest.mark.parametrize("N", [2, 3, 10, 100])
def test_phi_inverse_is_the_maximum_of_the_proof_sum(N: int) -> None:
    z = torch.linspace(0, 12, 200_001, dtype=torch.float64)[:, None].expand(-1, N - 1)
    best = softmax_distance_sum(z).max()
    torch.testing.assert_close(best, phi_inverse(N - 1), rtol=1e-8, atol=0)
    y = phi_inverse(N - 1)
    torch.testing.assert_close(y * torch.exp(y + 1), torch.tensor(N - 1, dtype=torch.float64))


@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 12), seed=st.integers(0, 10_000))
def test_unequal_distances_never_beat_phi_inverse(N: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    z = 6 * torch.rand(64, N - 1, generator=g, dtype=torch.float64)
    assert bool((softmax_distance_sum(z) <= phi_inverse(N - 1) + 1e-12).all())


@settings(max_examples=10, deadline=None)
@given(H=st.sampled_from([1, 2]), N=st.integers(2, 6), radius=st.floats(0.1, 6.0), seed=st.integers(0, 1000))
def test_bounds_hold_on_random_inputs(H: int, N: int, radius: float, seed: int) -> None:
    heads = random_l2_heads(4, H, seed=seed, scale=2.0)
    F = L2AttentionMap(heads)
    g = torch.Generator().manual_seed(seed)
    X = radius * torch.randn(8, N, 4, generator=g, dtype=torch.float64)
    assert bool((exact_local_lipschitz(F, X) <= theorem_3_2_two(heads, N, sharpened=True)).all())
    assert bool((exact_local_lipschitz_inf(F, X) <= theorem_3_2_inf(heads, N)).all())


def test_optimised_inputs_come_close_to_the_inf_bound_and_stay_below() -> None:
    eye = torch.eye(2, dtype=torch.float64)[None]
    heads = L2Heads(Q=eye, V=eye)
    for N in (4, 8):
        _, best = maximize_l2_lipschitz(heads, proof_start(heads, 3, N), "inf", steps=40)
        ratio = best.max() / theorem_3_2_inf(heads, N)
        assert 0.5 < ratio <= 1.0, ratio


def test_sheet_two_norm_statement_fails_when_the_queries_are_scaled() -> None:
    """The map scales like ``|W^Q|²``: the sheet's first-power statement is beaten, the squared one is not."""
    heads = random_l2_heads(4, 1, seed=0)
    big = L2Heads(Q=8 * heads.Q, V=heads.V, W=heads.W)
    X = torch.randn(64, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) / 8
    local = exact_local_lipschitz(L2AttentionMap(big), X).max()
    assert local > theorem_3_2_two_as_printed(big, 4)
    assert local <= theorem_3_2_two(big, 4, sharpened=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sharpened_constant_still_bounds_optimised_inputs(seed: int) -> None:
    """The derivation's claim: with 2√2 in place of 4 the 2-norm bound still holds, here against gradient
    ascent on the local constant from the proof's own worst configuration and from random starts."""
    heads = random_l2_heads(4, 2, seed=seed)
    for N in (4, 8):
        starts = torch.cat([proof_start(heads, 3, N, seed=seed),
                            torch.randn(3, N, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))])
        _, best = maximize_l2_lipschitz(heads, starts, "2", steps=40)
        assert float(best.max()) <= float(theorem_3_2_two(heads, N, sharpened=True))


def test_untied_heads_are_rejected() -> None:
    with pytest.raises(ValueError, match="tied"):
        theorem_3_2_two(random_l2_heads(4, tied=False), 4)
    with pytest.raises(ValueError, match="y >= 0"):
        phi_inverse(-1.0)
