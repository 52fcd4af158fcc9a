"""The bounds refuse what they cannot bound, naming the argument, instead of a raw shape error or a NaN: radii and
lengths that do not broadcast, step constants with a NaN, of the wrong length or given as a list, tokens, score
matrices and value maps of different widths, a Lambert-W argument or a token count that is NaN."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb.core import bounds, l2_bounds
from lipnb.core.l2_self_attention import L2Heads

F64 = torch.float64
A, V = torch.eye(3, dtype=F64), torch.eye(3, dtype=F64)
shapes = st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple)


def _broadcasts(*shapes: tuple[int, ...]) -> bool:
    try:
        torch.broadcast_shapes(*shapes)
    except RuntimeError:
        return False
    return True


@given(shapes, shapes)
def test_radii_and_lengths_broadcast_or_are_refused(r_shape: tuple, n_shape: tuple) -> None:
    R, n = torch.full(r_shape, 2.0, dtype=F64), torch.full(n_shape, 5.0, dtype=F64)
    calls = {"theorem_3_3": lambda: bounds.theorem_3_3(A, V, R, n),
             "theorem_e_3_sharpened": lambda: bounds.theorem_e_3_sharpened(A, V, R, n),
             "proposition_3_4": lambda: bounds.proposition_3_4(A, R, n),
             "lemma_c_7": lambda: bounds.lemma_c_7(1.0, R, n),
             "lemma_c_7_sharpened": lambda: bounds.lemma_c_7_sharpened(-1.0, R, n)}
    for name, call in calls.items():
        if _broadcasts(r_shape, n_shape):
            assert call().shape == torch.broadcast_shapes(r_shape, n_shape), name
        else:
            with pytest.raises(ValueError, match="R and n must broadcast"):
                call()


@given(st.integers(1, 6), st.one_of(
    st.integers(0, 8).map(lambda k: torch.ones(k, dtype=F64)),                        # any length
    st.just(torch.tensor([1.0, math.nan, 1.0], dtype=F64)), st.just(torch.tensor([1.0, -1.0, 1.0], dtype=F64)),
    st.just([1.0, 1.0, 1.0]), st.just(torch.ones(3, 1, dtype=F64)), st.just(torch.ones(3, dtype=torch.long))))
def test_step_constants_are_one_finite_constant_per_layer(L: int, steps: object) -> None:
    call = lambda: bounds.flow_gronwall_log(A, V, 1.0, 4, 1.0, L, step_constants=steps)  # noqa: E731
    good = isinstance(steps, torch.Tensor) and steps.dtype == F64 and tuple(steps.shape) == (L,) and bool(
        (steps >= 0).all())
    if good:
        logs = call()
        assert logs.shape == (L + 1,) and bool(torch.isfinite(logs).all())
    else:
        with pytest.raises((TypeError, ValueError), match="step_constants"):
            call()


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))
def test_tokens_scores_and_values_of_different_widths_are_refused(d_x: int, d_a: int, d_v: int) -> None:
    X = torch.randn(1, 3, d_x, dtype=F64, generator=torch.Generator().manual_seed(0))
    A_, V_ = torch.eye(d_a, dtype=F64), torch.ones(2, d_v, dtype=F64)
    calls = (lambda: bounds.theorem_c_3(X, A_, V_), lambda: bounds.theorem_3_7_limit(X, A_, V_),
             lambda: bounds.argmax_counts(X, A_), lambda: bounds.theorem_3_3(A_, V_, 1.0, 3))
    for i, call in enumerate(calls):
        widths = {d_a, d_v} if i == 3 else {d_x, d_a} if i == 2 else {d_x, d_a, d_v}
        if len(widths) == 1:
            assert bool(torch.isfinite(call()).all())
        else:
            with pytest.raises(ValueError, match=r"\bd\b|d ="):
                call()


@pytest.mark.parametrize("N", [0, -3, math.nan, math.inf, 2.5, "4"])
def test_l2_bounds_refuse_a_token_count_that_is_not_one(N: object) -> None:
    heads = L2Heads(Q=torch.eye(2, dtype=F64)[None], V=torch.eye(2, dtype=F64)[None])
    for bound in (l2_bounds.theorem_3_2_inf, l2_bounds.theorem_3_2_two, l2_bounds.theorem_3_2_two_as_printed):
        with pytest.raises((TypeError, ValueError), match="N"):
            bound(heads, N)


@pytest.mark.parametrize("y", [math.nan, math.inf, -1.0])
def test_phi_inverse_refuses_what_has_no_inverse(y: float) -> None:
    with pytest.raises(ValueError, match="y"):
        l2_bounds.phi_inverse(y)
