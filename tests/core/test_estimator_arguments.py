"""``local_lipschitz`` on the inputs issue 53 found answered wrongly or with the wrong cause: a float32 map whose
float64 evaluation is another map, ``confidence`` on a zero Jacobian, the errors of a map probed on its first input,
``seed`` as a numpy integer or out of range, ``detailed`` that is not a bool."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from torch import Tensor

from lipnb.arguments import check_seed
from lipnb.core.attention import MultiHead
from lipnb.core.jacobian import MultiHeadMap
from lipnb.core.lipschitz import local_lipschitz

F64 = torch.float64


def never_called(Z: Tensor) -> Tensor:
    raise AssertionError("the map was called before the arguments were checked")


# --------------------------------------------------------------------------- (a) a float64 evaluation of another map


def test_a_map_whose_float64_evaluation_is_another_map_is_refused() -> None:
    """``fn`` multiplies by 3 in float32 and by 5 in float64: the check that its float64 evaluation is ``fn`` takes
    its tolerance from float32's own scatter (here about 1e-7), not from the discrepancy it measures, so the call is
    refused instead of returning the float64 map's constant 5."""
    def fn(Z: Tensor) -> Tensor:
        return (3.0 if Z.dtype == torch.float32 else 5.0) * Z

    X = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="float64 evaluation's output differs"):
        local_lipschitz(fn, X)
    assert torch.allclose(local_lipschitz(fn, X.double()), torch.full((3,), 5.0, dtype=F64))


def test_a_promotion_that_computes_another_map_is_dropped() -> None:
    """A map whose float64 evaluation lipnb makes by promotion, and which reads its weights' dtype (3 for float32, 5
    otherwise): the promoted map is another map, so it is dropped and the float32 certificate gives the right 3."""
    W = torch.eye(2)

    def fn(Z: Tensor) -> Tensor:
        return (3.0 if W.dtype == torch.float32 else 5.0) * (Z @ W)

    X = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(1))
    res = local_lipschitz(fn, X, detailed=True)
    assert bool(res.converged.all())
    assert bool(((res.value.double() - 3).abs() / 3 <= res.error).all()), res.value


# --------------------------------------------------------------------------- (b) confidence on a zero Jacobian


@settings(max_examples=20, deadline=None)
@given(delta=st.floats(1e-6, 0.999), dtype=st.sampled_from([torch.float32, F64]), B=st.integers(1, 3))
def test_confidence_on_a_zero_jacobian_gives_zero(delta: float, dtype: torch.dtype, B: int) -> None:
    """A map of zero slope: the product of a random start is zero, which for a nonzero Jacobian has probability zero,
    so ``upper`` is 0 (it was NaN), as the value is."""
    X = torch.randn(B, 3, 2, dtype=dtype, generator=torch.Generator().manual_seed(B))
    res = local_lipschitz(lambda Z: 0.0 * Z + 1.0, X, confidence=delta, detailed=True)
    assert torch.equal(res.upper, torch.zeros(B, dtype=res.upper.dtype))
    assert bool((res.value == 0).all()) and bool(res.converged.all())


# --------------------------------------------------------------------------- (c) the cause of a failure on X[:1]


def _heads(d: int) -> MultiHeadMap:
    g = torch.Generator().manual_seed(0)
    return MultiHeadMap(MultiHead(torch.randn(1, d, d, generator=g, dtype=F64), torch.randn(1, d, d, generator=g,
                        dtype=F64), torch.randn(1, d, d, generator=g, dtype=F64)))


def _own_error(Z: Tensor) -> Tensor:
    raise ValueError("the user's own complaint")


@pytest.mark.parametrize(
    ("fn", "cause"),
    [
        (lambda Z: (Z, Z), "returned a tuple"),
        (lambda Z: Z.sum(1), r"2-D"),
        (lambda Z: Z * math.nan, "NaN"),
        (_heads(8), "heads expect d = 8"),
        (_own_error, "the user's own complaint"),
    ],
    ids=["tuple", "2-d", "nan", "width", "own-error"],
)
@pytest.mark.parametrize("B", [1, 3])
def test_a_map_failing_on_its_first_input_is_reported_by_its_cause(fn: object, cause: str, B: int) -> None:
    """Whether the memory probe on ``X[:1]`` runs (``B > 1``) or not, a tuple or 2-D output, a NaN, a map given the
    wrong width and the map's own ``ValueError`` are each reported by what they are, never as batch dependence."""
    X = torch.randn(B, 3, 4, dtype=F64)
    with pytest.raises(ValueError, match=cause) as info:
        local_lipschitz(fn, X)
    assert "depends on the batch" not in str(info.value)


def test_a_map_that_depends_on_the_batch_is_still_named_so() -> None:
    D = torch.ones(4, 3, 4, dtype=F64)
    with pytest.raises(ValueError, match="depends on the batch"):
        local_lipschitz(lambda Z: Z * D, torch.randn(4, 3, 4, dtype=F64))


# --------------------------------------------------------------------------- (d) seed


@given(seed=st.integers(0, 2 ** 64 - 1))
def test_every_seed_in_range_is_accepted_and_seeds_torch(seed: int) -> None:
    assert check_seed(seed) == seed
    torch.Generator().manual_seed(check_seed(seed))


@given(seed=st.one_of(st.integers(max_value=-1), st.integers(min_value=2 ** 64)))
def test_seeds_out_of_range_are_refused_before_any_work(seed: int) -> None:
    with pytest.raises(ValueError, match=r"seed must be"):
        local_lipschitz(never_called, torch.randn(2, 3, 2), seed=seed)


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8, np.uint64])
def test_numpy_integer_seeds_give_the_int_seed_result(kind: type) -> None:
    fn = _heads(4)
    X = torch.randn(3, 5, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    a = local_lipschitz(fn, X, seed=kind(7), detailed=True)
    b = local_lipschitz(fn, X, seed=7, detailed=True)
    assert torch.equal(a.value, b.value) and torch.equal(a.right_vector, b.right_vector)


@pytest.mark.parametrize("seed", [1.0, "3", True, None, torch.tensor([1, 2])])
def test_non_integer_seeds_are_refused(seed: object) -> None:
    with pytest.raises(TypeError, match="seed must be an int"):
        local_lipschitz(never_called, torch.randn(2, 3, 2), seed=seed)


# --------------------------------------------------------------------------- (e) detailed


@given(detailed=st.one_of(st.text(), st.integers(), st.floats(), st.none(), st.lists(st.booleans(), max_size=2)))
def test_detailed_must_be_a_bool(detailed: object) -> None:
    """``detailed="no"`` read as True before: anything but ``True``/``False`` is a ``TypeError``, before any work."""
    with pytest.raises(TypeError, match="detailed must be True or False"):
        local_lipschitz(never_called, torch.randn(2, 3, 2), detailed=detailed)
