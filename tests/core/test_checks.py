"""Every public function of lipnb either returns finite values or refuses its input with a ValueError or
TypeError that names the bad argument (hypothesis over the argument spaces)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb.arguments import all_finite, as_count, as_radius, check_float, check_positive_int
from lipnb.core import bounds, inputs

f64 = torch.float64
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-10, 10**6))
radii = st.one_of(numbers, st.booleans(), st.just("1.0"), st.none())
counts = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.just("3"))


def _head(d: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.diag(torch.tensor([1.0, -0.5, 0.25], dtype=f64))[:d, :d], torch.eye(d, dtype=f64)


def _finite_or_named_error(call, *names: str) -> None:
    """``call()`` gives finite values, or raises ValueError/TypeError whose message names one of ``names``."""
    try:
        out = call()
    except (ValueError, TypeError) as error:
        assert any(name in str(error) for name in names), f"{error!r} names none of {names}"
        return
    values = torch.as_tensor(out)
    if values.is_floating_point():
        # exp(γR²) may overflow to inf for huge radii: a bound of +inf is a true (vacuous) statement, NaN is not.
        assert not bool(torch.isnan(values).any()), f"NaN from {names}"


@given(R=radii, n=counts)
def test_radius_and_length_bounds(R, n) -> None:
    A, V = _head()
    for bound in (bounds.theorem_3_3, bounds.proposition_3_4):
        args = (A, V, R, n) if bound is bounds.theorem_3_3 else (A, R, n)
        _finite_or_named_error(lambda b=bound, a=args: b(*a), "R", "n")
    _finite_or_named_error(lambda: bounds.lemma_c_7(0.5, R, n), "R", "n")
    _finite_or_named_error(lambda: bounds.lemma_c_7_sharpened(-0.5, R, n), "R", "n")
    for bound in (bounds.theorem_3_5, bounds.theorem_3_5_sharpened, bounds.masked_mean_field_bound):
        _finite_or_named_error(lambda b=bound: b(A, V, R), "R")
    _finite_or_named_error(lambda: bounds._proposition_3_6(A, R), "R")
    _finite_or_named_error(lambda: bounds.two_dirac_constant(0.3, R), "R")


@pytest.mark.parametrize("R, n", [(-1.0, 4), (float("nan"), 4), (1.0, 0), (1.0, 2.5), (1.0, -3)])
def test_bounds_refuse_negative_radius_and_bad_lengths(R, n) -> None:
    A, V = _head()
    with pytest.raises(ValueError, match=r"R must|n must"):
        bounds.theorem_3_3(A, V, R, n)


def test_integer_and_missing_matrices_are_type_errors() -> None:
    A, V = _head()
    with pytest.raises(TypeError, match="A must be a floating-point"):
        bounds.theorem_3_3(A.long(), V, 1.0, 4)
    with pytest.raises(TypeError, match="floating-point"):
        bounds.theorem_3_5(A, [[1.0]], 1.0)
    with pytest.raises(TypeError, match="A must be float32 or float64"):
        inputs.lemma_c_7_input(A.long(), 1.0, 4)
    with pytest.raises(TypeError, match="A must be float32 or float64"):
        inputs.head_spectra(A.long().unsqueeze(0))


@given(batch=st.integers(-2, 3), n=st.integers(-2, 5), d=st.integers(-2, 4), R=radii)
def test_ball_tokens(batch, n, d, R) -> None:
    try:
        X = inputs.ball_tokens(batch, n, d, R)
    except (ValueError, TypeError) as error:
        assert any(k in str(error) for k in ("batch", "n must", "d must", "R")), error
        return
    assert X.shape == (batch, n, d) and bool((X.norm(dim=-1) <= float(R) * (1 + 1e-12)).all())


@given(R=radii, n=st.one_of(st.integers(-2, 6), st.floats(0, 5)))
def test_lemma_c_7_input(R, n) -> None:
    A, _ = _head()
    try:
        X = inputs.lemma_c_7_input(A, R, n)
    except (ValueError, TypeError) as error:
        assert "R" in str(error) or "n must" in str(error), error
        return
    assert bool(torch.isfinite(X).all()) and bool((X.norm(dim=-1) <= float(R) * (1 + 1e-12)).all())


def test_quadratic_growth_input_checks() -> None:
    with pytest.raises(ValueError, match="n must be >= 2"):
        inputs.quadratic_growth_input(1.0, 1, 3)
    with pytest.raises(TypeError, match="dtype"):
        inputs.quadratic_growth_input(1.0, 3, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="R must be >= 0"):
        inputs.quadratic_growth_input(-1.0, 3, 3)


def test_flow_bounds_check_their_steps() -> None:
    _, V = _head()
    with pytest.raises(ValueError, match="L must be >= 1"):
        bounds.flow_radius_bound(1.0, V, 1.0, 0)
    with pytest.raises(TypeError, match="L must be an int"):
        bounds.flow_radius_bound(1.0, V, 1.0, 2.0)
    with pytest.raises(ValueError, match="T must be >= 0"):
        bounds.flow_radius_bound(1.0, V, -1.0, 3)


def test_the_checks_themselves() -> None:
    assert as_radius(2).item() == 2.0 and as_count(torch.tensor([2.0, 3.0])).tolist() == [2.0, 3.0]
    assert check_positive_int(3, "k") == 3
    for bad, error in ((True, TypeError), ("1", TypeError), (math.inf, ValueError), (-0.5, ValueError)):
        with pytest.raises(error, match="R"):
            as_radius(bad)
    with pytest.raises(ValueError, match="X contains NaN"):
        check_float(torch.tensor([1.0, math.nan]), "X")
    with pytest.raises(ValueError, match="X is empty"):
        check_float(torch.zeros(0, 3), "X")
    with pytest.raises(TypeError, match="X must be float32 or float64"):
        check_float(torch.zeros(2, dtype=torch.float16), "X")


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_local_lipschitz_refuses_a_map_that_returns_nan(method: str) -> None:
    from lipnb import local_lipschitz

    with pytest.raises(ValueError, match="fn returned NaN or inf"):
        local_lipschitz(lambda Z: Z * math.nan, torch.randn(2, 4, 3), method=method)


def test_local_lipschitz_refuses_integer_tokens() -> None:
    from lipnb import local_lipschitz

    with pytest.raises(TypeError, match="X must hold floating-point tokens"):
        local_lipschitz(lambda Z: Z, torch.ones(2, 4, 3, dtype=torch.long))


def test_fits_refuse_what_they_cannot_fit() -> None:
    from lipnb.experiments import stats

    with pytest.raises(ValueError, match="same number"):
        stats.fit_line(torch.arange(3.0), torch.arange(4.0))
    with pytest.raises(ValueError, match="finite"):
        stats.fit_line(torch.tensor([1.0, 2.0, math.nan]), torch.arange(3.0))
    with pytest.raises(ValueError, match="two distinct"):
        stats.bootstrap_slope(torch.ones(4), torch.arange(4.0))
    with pytest.raises(ValueError, match="resamples"):
        stats.bootstrap_slope(torch.arange(4.0), torch.arange(4.0), resamples=0)
    with pytest.raises(ValueError, match="level"):
        stats.student_interval(torch.tensor([1.0, 2.0]), level=1.5)
    with pytest.raises(ValueError, match="two finite replicates"):
        stats.student_interval(torch.tensor([1.0]))


def test_flow_checks_its_steps() -> None:
    from lipnb.core import flow

    X, A = torch.randn(1, 4, 3, dtype=f64), torch.eye(3, dtype=f64)
    with pytest.raises(ValueError, match="L must be >= 1"):
        flow.attention_flow(X, A, A, 1.0, 0)
    with pytest.raises(ValueError, match="T must be finite"):
        flow.attention_flow_rk4(X, A, A, math.inf, 3)
    with pytest.raises(ValueError, match="tol must be > 0"):
        flow.cluster_labels(X[0], -1.0)


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=40),
       st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
def test_all_finite_agrees_with_the_entrywise_test(values: list[float], dtype: torch.dtype) -> None:
    """The one-sum test answers as ``isfinite(X).all()`` for any entries, overflowing sums of finite ones included."""
    X = torch.tensor(values).to(dtype)
    assert all_finite(X) == bool(torch.isfinite(X).all())


def test_all_finite_when_finite_entries_overflow_their_sum() -> None:
    X = torch.full((4,), torch.finfo(torch.float32).max)
    assert not torch.isfinite(X.sum()) and all_finite(X)
    assert not all_finite(torch.tensor([math.inf, -math.inf])) and not all_finite(torch.tensor([1.0, math.nan]))
