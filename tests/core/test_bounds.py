"""The bounds of :mod:`lipnb.core.bounds` against exact local Lipschitz constants (dense float64 SVD).

Every upper bound must be >= ``Lip_X f`` and every lower bound <= it, on random inputs (hypothesis)
and on the adversarial inputs of :mod:`lipnb.core.inputs`. Comparisons allow only float64 rounding
(``SLACK``), since some bounds are attained exactly (one token, or all tokens equal). Also: Theorem C.3 term
by term, the fast multi-head data bound, the sharpened Theorems 3.5 and E.3 (and their log forms), the
corrected Theorem 4.4 with the weighted Hardy lemma, and the flow's radius and Grönwall bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from conftest import random_attention_params, random_head_matrix
from hypothesis import assume, given
from hypothesis.extra.numpy import arrays
from torch import Tensor

from lipnb.core import bounds
from lipnb.core import inputs as adv
from lipnb.core.attention import MultiHead, attention_matrix, multihead_attention, self_attention
from lipnb.core.bounds import (
    flow_gronwall_log,
    flow_radius_bound,
    log_theorem_3_5,
    log_theorem_3_5_sharpened,
    masked_mean_field_bound,
    multihead_data_bound,
    theorem_3_3,
    theorem_3_5,
    theorem_3_5_sharpened,
    theorem_c_3,
    theorem_c_3_terms,
    theorem_e_3,
    theorem_e_3_sharpened,
    two_dirac_constant,
)
from lipnb.core.dense import exact_local_lipschitz
from lipnb.core.flow import attention_flow, flow_jacobians
from lipnb.core.inputs import ball_tokens, lemma_c_7_input, proposition_3_6_measure
from lipnb.core.jacobian import lemma_c_2_term_matrices
from lipnb.core.lipschitz import local_lipschitz
from lipnb.core.measures import masked_mean_field, masked_mean_field_ratio, weighted_attention_lipschitz

F64 = torch.float64
SLACK = 1e-12  # relative float64 rounding allowed in "bound >= exact" when the bound is attained


def matrices(rows: int, cols: int, bound: float = 2.0) -> st.SearchStrategy[Tensor]:
    """Float64 ``(rows, cols)`` tensors with entries in ``[-bound, bound]``, magnitudes below 1e-8 flushed to 0
    (LAPACK's eig is unreliable on entries spanning many orders of magnitude: see ``test_adversarial.ENTRIES``)."""
    elements = st.floats(-bound, bound, allow_nan=False, allow_subnormal=False).map(
        lambda x: x if abs(x) >= 1e-8 else 0.0)
    return arrays(np.float64, (rows, cols), elements=elements).map(torch.from_numpy)


@st.composite
def problems(draw: st.DrawFn, max_n: int = 4, max_d: int = 3, max_radius: float = 3.0
             ) -> tuple[Tensor, Tensor, Tensor]:
    """``(X (1, n, d), A (d, d), V (d_v, d))``: tokens in ``[-1, 1]^d`` rescaled to a random radius."""
    n, d, dv = draw(st.integers(1, max_n)), draw(st.integers(1, max_d)), draw(st.integers(1, 3))
    X = draw(matrices(n, d, 1.0))
    radius = draw(st.floats(0.0, max_radius))
    top = X.norm(dim=-1).max()
    X = X * (radius / top) if top > 0 else X
    return X.unsqueeze(0), draw(matrices(d, d)), draw(matrices(dv, d))


Map = Callable[[Tensor], Tensor]


def radius_of(X: Tensor) -> float:
    """``R``: the largest token norm, so that ``X`` lies in ``B_R^n``."""
    return float(X.norm(dim=-1).max())


def random_heads(gen: torch.Generator, H: int, d: int, k: int) -> MultiHead:
    """A random multi-head layer with query, value and output biases (App. E.3)."""
    def r(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=F64)

    return MultiHead.from_projections(r(H, k, d), r(H, k, d), r(H, k, d), r(H, d, k),
                                      q_bias=r(H, k), v_bias=r(H, k), o_bias=r(d))


# --------------------------------------------------------------------------- closed forms


def test_theorem_3_3_closed_form() -> None:
    """Theorem 3.3: ``√3 ||V|| (||A||² R⁴ (4n+1) + n)^{1/2}``, broadcast over ``R`` and ``n``."""
    A, V = 2 * torch.eye(3, dtype=F64), 3 * torch.eye(3, dtype=F64)
    R = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    expected = math.sqrt(3) * 3 * torch.sqrt(4 * R**4 * (4 * 5 + 1) + 5)
    torch.testing.assert_close(bounds.theorem_3_3(A, V, R, 5), expected)
    n = torch.tensor([[1.0], [10.0]], dtype=F64)
    assert bounds.theorem_3_3(A, V, R, n).shape == (2, 3)


def test_theorem_e_3_reduces_to_theorem_3_3(gen: torch.Generator) -> None:
    """Theorem E.3 with score bias ``c = 0`` (or ``None``) is Theorem 3.3; a bias only increases it."""
    A, V = torch.randn(3, 3, generator=gen, dtype=F64), torch.randn(2, 3, generator=gen, dtype=F64)
    base = bounds.theorem_3_3(A, V, 1.7, 6)
    torch.testing.assert_close(bounds.theorem_e_3(A, V, 1.7, 6), base)
    torch.testing.assert_close(bounds.theorem_e_3(A, V, 1.7, 6, torch.zeros(3, dtype=F64)), base)
    assert float(bounds.theorem_e_3(A, V, 1.7, 6, torch.ones(3, dtype=F64))) > float(base)


def test_theorem_3_5_and_lemma_3_8_closed_forms() -> None:
    """Theorem 3.5 ``||V|| (1 + 3||A|| R²) e^{2||A|| R²}``; Lemma 3.8 ``Σ_h ||W_h|| c_h``."""
    A, V = 0.5 * torch.eye(2, dtype=F64), 2 * torch.eye(2, dtype=F64)
    torch.testing.assert_close(bounds.theorem_3_5(A, V, 2.0), torch.tensor(2 * 7 * math.exp(4), dtype=F64))
    W = torch.stack([2 * torch.eye(2, dtype=F64), 3 * torch.eye(2, dtype=F64)])
    torch.testing.assert_close(bounds._lemma_3_8(W, torch.tensor([1.0, 10.0])), torch.tensor(32.0, dtype=F64))


def test_gamma_and_lower_bound_closed_forms() -> None:
    """Proposition 3.4: ``γ = max(γ_1/8, -γ_d)`` and ``√(n-1) / (1 + (n-1) e^{-2γR²})``; Lemma C.7's ``p``."""
    assert float(bounds.gamma(torch.diag(torch.tensor([4.0, -1.0], dtype=F64)))) == 1.0
    A = torch.diag(torch.tensor([16.0, 0.5, -1.0], dtype=F64))
    assert float(bounds.gamma(A)) == 2.0
    R, n = torch.tensor([0.3, 1.0], dtype=F64), 5
    torch.testing.assert_close(bounds.proposition_3_4(A, R, n), 2 / (1 + 4 * torch.exp(-4 * R**2)))
    torch.testing.assert_close(bounds.lemma_c_7(16.0, R, n), 2 / (1 + 4 * torch.exp(-4 * R**2)))
    torch.testing.assert_close(bounds.lemma_c_7(-1.0, R, n), 2 / (1 + 4 * torch.exp(-2 * R**2)))
    torch.testing.assert_close(bounds._proposition_3_6(A, R), 1.0 * R**2 * torch.exp(2 * R**2))


def test_argmax_counts_and_limit() -> None:
    """Theorem 3.7: ``#{i : m_i = j}`` (masked: ``j <= i``) and the limit ``||V|| √(max_j count)``."""
    X = torch.tensor([[[3.0, 0.0], [1.0, 0.0], [0.0, 1.0]]], dtype=F64)
    A = torch.eye(2, dtype=F64)
    assert bounds.argmax_counts(X, A).tolist() == [[2, 0, 1]]
    assert bounds.argmax_counts(X, A, masked=True).tolist() == [[2, 0, 1]]
    Xm = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [0.0, 1.0]]], dtype=F64)  # token 1 looks ahead unless masked
    assert bounds.argmax_counts(Xm, A).tolist() == [[0, 2, 1]]
    assert bounds.argmax_counts(Xm, A, masked=True).tolist() == [[1, 1, 1]]
    V = torch.diag(torch.tensor([2.0, 0.5], dtype=F64))
    torch.testing.assert_close(bounds.theorem_3_7_limit(X, A, V), torch.tensor([2 * math.sqrt(2)], dtype=F64))


# --------------------------------------------------------------------------- upper bounds, random inputs


@given(problem=problems(), masked=st.booleans())
def test_theorem_3_3_and_c_3_upper_bounds(problem: tuple[Tensor, Tensor, Tensor],
                                          masked: bool) -> None:
    """Theorems 3.3 / 4.3 (masked) and C.3 at ``X``: ``Lip_X f <= C.3(X) <= 3.3(R = max |x_i|)``."""
    X, A, V = problem
    exact = float(exact_local_lipschitz(lambda Z: self_attention(Z, A, V, masked=masked), X)[0])
    data = float(bounds.theorem_c_3(X, A, V, masked=masked)[0])
    uniform = float(bounds.theorem_3_3(A, V, radius_of(X), X.shape[1]))
    assert exact <= data * (1 + SLACK)
    assert data <= uniform * (1 + SLACK)


@given(problem=problems(), c=matrices(1, 3), masked=st.booleans())
def test_theorem_c_3_and_e_3_with_score_bias(problem: tuple[Tensor, Tensor, Tensor],
                                             c: Tensor, masked: bool) -> None:
    """Theorems C.3 and E.3 with a score bias (scores ``<A x_i + c, x_j>``): ``Lip_X f <= C.3 <= E.3``."""
    X, A, V = problem
    c = c[0, : A.shape[0]]

    def f(Z: Tensor) -> Tensor:
        return attention_matrix(Z, A, score_bias=c, masked=masked) @ Z @ V.mT

    exact = float(exact_local_lipschitz(f, X)[0])
    data = float(bounds.theorem_c_3(X, A, V, score_bias=c, masked=masked)[0])
    uniform = float(bounds.theorem_e_3(A, V, radius_of(X), X.shape[1], c))
    assert exact <= data * (1 + SLACK)
    assert data <= uniform * (1 + SLACK)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), d=st.integers(1, 3), radius=st.floats(0.0, 3.0),
       masked=st.booleans())
def test_theorem_e_3_biased_single_head(seed: int, n: int, d: int, radius: float,
                                        masked: bool) -> None:
    """Theorem E.3: a single head with query, value and output biases, effective value matrix ``W V``."""
    gen = torch.Generator().manual_seed(seed)
    heads = random_heads(gen, 1, d, 2)
    X = torch.randn(1, n, d, generator=gen, dtype=F64)
    X = radius * X / X.norm(dim=-1).max()
    exact = float(exact_local_lipschitz(lambda Z: multihead_attention(Z, heads, masked=masked), X)[0])
    bound = bounds.theorem_e_3(heads.A[0], heads.W[0] @ heads.V[0], radius_of(X), n, heads.score_bias[0])
    assert exact <= float(bound) * (1 + SLACK)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), H=st.integers(1, 3), k=st.integers(1, 2),
       radius=st.floats(0.0, 2.5), masked=st.booleans())
def test_multihead_bounds(seed: int, n: int, H: int, k: int, radius: float,
                          masked: bool) -> None:
    """Lemma 3.8 + Theorems C.3 / E.3 for biased multi-head layers: ``Lip_X <= data bound <= uniform bound``."""
    gen = torch.Generator().manual_seed(seed)
    d = 3
    heads = random_heads(gen, H, d, k)
    X = torch.randn(1, n, d, generator=gen, dtype=F64)
    X = radius * X / X.norm(dim=-1).max()
    exact = float(exact_local_lipschitz(lambda Z: multihead_attention(Z, heads, masked=masked), X)[0])
    data = float(bounds.multihead_data_bound(X, heads, masked=masked)[0])
    uniform = float(bounds.multihead_bound(heads, radius_of(X), n))
    assert exact <= data * (1 + SLACK)
    assert data <= uniform * (1 + SLACK)


@given(problem=problems(max_radius=1.5))
def test_theorem_3_5_equation_1(problem: tuple[Tensor, Tensor, Tensor]) -> None:
    """Theorem 3.5 / Equation (1): ``Lip_X f <= ||V|| (1 + 3||A|| R²) e^{2||A|| R²}`` for every ``n`` (small R)."""
    X, A, V = problem
    exact = float(exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)[0])
    assert exact <= float(bounds.theorem_3_5(A, V, radius_of(X))) * (1 + SLACK)


@pytest.mark.parametrize("n", [2, 5, 50])
def test_equation_1_does_not_cover_masked_attention(n: int) -> None:
    """Equation (1) is for unmasked attention only: at ``X = 0`` (``R = 0``) masked attention has
    ``P = C_n``, the Cesàro averaging matrix, so ``Lip_0 f^m = ||V|| ||C_n||₂ > ||V||`` = Theorem 3.5's value
    (``||C_n||₂`` = 1.144 for n = 2, increasing to 2 by Hardy's inequality). Theorem 4.3 (the Theorem 3.3
    bound, ``√3 ||V|| √n`` at ``R = 0``) still holds."""
    d = 2
    A, V = torch.zeros(d, d, dtype=F64), torch.eye(d, dtype=F64)
    X = torch.zeros(1, n, d, dtype=F64)
    C = torch.tril(torch.ones(n, n, dtype=F64))
    C = C / C.sum(1, keepdim=True)
    exact = exact_local_lipschitz(lambda Z: self_attention(Z, A, V, masked=True), X)
    torch.testing.assert_close(exact[0], torch.linalg.matrix_norm(C, ord=2))
    assert float(exact[0]) > 1.1 * float(bounds.theorem_3_5(A, V, 0.0))
    assert float(exact[0]) <= float(bounds.theorem_3_3(A, V, 0.0, n))
    unmasked = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)
    torch.testing.assert_close(unmasked[0], bounds.theorem_3_5(A, V, 0.0))


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), H=st.integers(1, 3), radius=st.floats(0.0, 3.0))
def test_lemma_3_8_with_exact_head_constants(seed: int, n: int, H: int, radius: float) -> None:
    """Lemma 3.8 at ``X``: ``Lip_X f^MH <= Σ_h ||W_h||₂ Lip_X f_h`` with exact per-head constants."""
    gen = torch.Generator().manual_seed(seed)
    heads = random_heads(gen, H, 3, 2)
    X = torch.randn(1, n, 3, generator=gen, dtype=F64)
    X = radius * X / X.norm(dim=-1).max()
    exact = float(exact_local_lipschitz(lambda Z: multihead_attention(Z, heads), X)[0])
    per_head = []
    for h in range(H):
        head = MultiHead(A=heads.A[h:h + 1], V=heads.V[h:h + 1], W=torch.eye(2, dtype=F64)[None],
                         score_bias=heads.score_bias[h:h + 1], value_bias=heads.value_bias[h:h + 1])
        per_head.append(float(exact_local_lipschitz(lambda Z, head=head: multihead_attention(Z, head), X)[0]))
    assert exact <= float(bounds._lemma_3_8(heads.W, torch.tensor(per_head, dtype=F64))) * (1 + SLACK)


# --------------------------------------------------------------------------- bounds at adversarial inputs

SPECTRA = {
    "positive-dominant": [3.0, 0.5, -0.2],
    "negative-dominant": [0.8, -0.3, -1.5],
    "one-negative": [-0.7],
    "two-by-two": [2.0, -0.1],
}


def matrix_with_spectrum(values: list[float], seed: int = 0) -> Tensor:
    """A non-symmetric matrix ``S diag(values) S⁻¹`` with the given real eigenvalues."""
    gen = torch.Generator().manual_seed(seed)
    d = len(values)
    S = torch.eye(d, dtype=F64) + 0.3 * torch.randn(d, d, generator=gen, dtype=F64)
    return S @ torch.diag(torch.tensor(values, dtype=F64)) @ torch.linalg.inv(S)


@pytest.mark.parametrize("spectrum", list(SPECTRA), ids=list(SPECTRA))
@pytest.mark.parametrize("n", [2, 3, 6])
def test_lower_bounds_at_lemma_c_7_inputs(spectrum: str, n: int) -> None:
    """Lemma C.7 (both cases) and Proposition 3.4 (auto rule), ``V = I``: ``Lip_X f >= √(n-1) p``."""
    A = matrix_with_spectrum(SPECTRA[spectrum])
    d = A.shape[0]
    values, _ = adv.real_eigenpairs(A)
    identity = torch.eye(d, dtype=F64)
    R = torch.tensor([0.1, 0.5, 1.0, 2.0, 4.0], dtype=F64)
    checked = 0
    for case, lam in (("positive", values[0]), ("negative", values[-1]), ("auto", None)):
        if (case == "positive" and lam <= 0) or (case == "negative" and lam >= 0):
            continue
        X = adv.lemma_c_7_input(A, R, n, case=case)
        exact = exact_local_lipschitz(lambda Z: self_attention(Z, A, identity), X)
        if case == "auto":
            lower = bounds.proposition_3_4(A, R, n)
        else:
            lower = bounds.lemma_c_7(lam, R, n)
        assert bool((exact >= lower * (1 - SLACK)).all()), (case, exact, lower)
        checked += 1
    assert checked >= 2


@given(A=st.integers(1, 3).flatmap(lambda d: matrices(d, d, 3.0)), n=st.integers(2, 5),
       R=st.floats(0.05, 4.0), case=st.sampled_from(["positive", "negative", "auto"]))
def test_lower_bound_property(A: Tensor, n: int, R: float, case: str) -> None:
    """Lemma C.7 / Proposition 3.4 for random ``A`` with a real eigenvalue of the right sign."""
    try:
        values, _ = adv.real_eigenpairs(A)
        X = adv.lemma_c_7_input(A, R, n, case=case)
    except ValueError:
        assume(False)
        raise
    assume(float(values.abs().max()) > 1e-6)
    chosen = adv.adversarial_case(A) if case == "auto" else case
    lam = values[0] if chosen == "positive" else values[-1]
    exact = float(exact_local_lipschitz(lambda Z: self_attention(Z, A, torch.eye(A.shape[0], dtype=F64)), X)[0])
    assert exact >= float(bounds.lemma_c_7(lam, R, n)) * (1 - SLACK)
    if case == "auto":
        assert exact >= float(bounds.proposition_3_4(A, R, n)) * (1 - SLACK)


@pytest.mark.parametrize("masked", [False, True])
def test_upper_bounds_at_adversarial_inputs(masked: bool) -> None:
    """Theorems 3.3 / C.3 / 3.5 stay above ``Lip_X f`` at the inputs built to make it large."""
    A = matrix_with_spectrum(SPECTRA["positive-dominant"])
    gen = torch.Generator().manual_seed(3)
    V = torch.randn(3, 3, generator=gen, dtype=F64)
    R = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=F64)
    inputs = [adv.lemma_c_7_input(A, R, 5, case="positive"), adv.lemma_c_7_input(A, R, 5, case="negative"),
              adv.argmax_configuration(A, R, 5), adv.quadratic_growth_input(R, 5, 3)]
    for X in inputs:
        radii = X.norm(dim=-1).amax(-1)
        exact = exact_local_lipschitz(lambda Z: self_attention(Z, A, V, masked=masked), X)
        assert bool((exact <= bounds.theorem_c_3(X, A, V, masked=masked) * (1 + SLACK)).all())
        assert bool((exact <= bounds.theorem_3_3(A, V, radii, 5) * (1 + SLACK)).all())
        assert bool((exact <= bounds.theorem_3_5(A, V, radii) * (1 + SLACK)).all())


# --------------------------------------------------------------------------- bad input


ROTATION = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bounds.gamma(ROTATION), "no real eigenvalue"),
        (lambda: bounds.proposition_3_4(ROTATION, 1.0, 3), "no real eigenvalue"),
        (lambda: bounds._proposition_3_6(ROTATION, 1.0), "no real eigenvalue"),
        (lambda: bounds.gamma(torch.ones(2, 3, dtype=F64)), "square"),
        (lambda: bounds.theorem_c_3(torch.full((1, 2, 2), float("nan")), ROTATION, ROTATION), "NaN or inf"),
        (lambda: bounds.theorem_c_3(torch.ones(1, 2, 3, dtype=F64), ROTATION, ROTATION), "d = 3"),
        (lambda: bounds.theorem_c_3(torch.ones(2, 3, dtype=F64), ROTATION, ROTATION), "shape \\(batch, n, d\\)"),
        (lambda: bounds.theorem_c_3(torch.ones(1, 0, 2, dtype=F64), ROTATION, ROTATION), "n = 0"),
        (lambda: bounds.multihead_data_bound(torch.ones(1, 2, 3, dtype=F64),
                                             MultiHead.single(ROTATION, ROTATION)), "d = 3"),
        (lambda: bounds.theorem_3_7_limit(torch.ones(3, 2, dtype=F64), ROTATION, ROTATION), "shape"),
    ],
    ids=["gamma-rotation", "prop-3.4-rotation", "prop-3.6-rotation", "gamma-not-square", "c3-X-nan",
         "c3-A-wrong-d", "c3-X-rank", "c3-n-zero", "mh-data-wrong-d", "limit-X-rank"],
)
def test_bad_input_raises_value_error(call: Callable[[], object], message: str) -> None:
    """Input validation: each bad input raises ``ValueError`` whose message names the problem."""
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: bounds.theorem_3_3(ROTATION * float("nan"), ROTATION, 1.0, 3), "A contains NaN or inf"),
        (lambda: bounds.theorem_3_5(ROTATION, ROTATION * float("inf"), 1.0), "V contains NaN or inf"),
        (lambda: bounds.theorem_3_3(torch.ones(2, 3, dtype=F64), ROTATION, 1.0, 3), "square"),
        (lambda: bounds.theorem_3_3(ROTATION, torch.ones(2, 3, dtype=F64), 1.0, 3), "V"),
        (lambda: bounds.theorem_c_3(torch.ones(1, 2, 2, dtype=F64), ROTATION, torch.ones(2, 3, dtype=F64)), "V"),
    ],
    ids=["3.3-A-nan", "3.5-V-inf", "3.3-A-not-square", "3.3-V-wrong-d", "c3-V-wrong-d"],
)
def test_bug_bounds_do_not_validate_a_and_v(call: Callable[[], object], message: str) -> None:
    """Regression (was a reported bug): the closed-form bounds take ``||A||₂, ||V||₂`` of whatever they are given:
    NaN/inf raise a bare ``LinAlgError``, and non-square ``A`` or ``V`` not matching ``d`` return a number."""
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------- Theorem C.3 term by term, the fast data bound, Theorem E.3 sharpened


@pytest.mark.parametrize("masked", [False, True])
def test_theorem_c_3_terms_bound_each_term_and_sum_to_the_library(gen: torch.Generator, masked: bool) -> None:
    d, R = 4, 2.0
    X, A = ball_tokens(3, 6, d, R, seed=1), random_head_matrix(gen, d)
    V = torch.randn(2, d, generator=gen, dtype=F64)
    c = torch.randn(d, generator=gen, dtype=F64)
    bounds = theorem_c_3_terms(X, A, masked=masked)
    assert torch.allclose(bounds, theorem_c_3_terms(X, A, masked=masked), rtol=1e-9)
    exact = torch.linalg.matrix_norm(lemma_c_2_term_matrices(X, A, masked=masked), ord=2)
    assert bool((exact <= bounds * (1 + 1e-12)).all())
    assert torch.allclose(torch.linalg.matrix_norm(V, ord=2) * bounds.sum(1), theorem_c_3(X, A, V, masked=masked))
    with_bias = theorem_c_3_terms(X, A, score_bias=c, masked=masked).sum(1)
    assert torch.allclose(with_bias, theorem_c_3(X, A, torch.eye(d, dtype=F64), score_bias=c, masked=masked))
    f = lambda Z: self_attention(Z, A, V, masked=masked)  # noqa: E731
    assert bool((exact_local_lipschitz(f, X) <= theorem_c_3(X, A, V, masked=masked)).all())
    assert bool((theorem_c_3(X, A, V, masked=masked) <= theorem_3_3(A, V, R, 6)).all())


@pytest.mark.parametrize(("n", "masked"), [(4, False), (4, True), (9, False)])
def test_fast_data_bound_equals_the_library(gen: torch.Generator, n: int, masked: bool) -> None:
    H, k, d = 2, 3, 7
    heads = MultiHead.from_projections(*(torch.randn(3, H, k, d, generator=gen, dtype=F64)),
                                       torch.randn(H, 5, k, generator=gen, dtype=F64),
                                       q_bias=torch.randn(H, k, generator=gen, dtype=F64))
    X = ball_tokens(2, n, d, 1.5, seed=2)
    fast = multihead_data_bound(X, heads, masked=masked)
    assert torch.allclose(fast, multihead_data_bound(X, heads, masked=masked), rtol=1e-9)


def test_float32_low_rank_heads_keep_an_upper_bound(gen: torch.Generator) -> None:
    """A float32 ``A = KᵀQ/√k`` has rounding noise outside rank k: the fast bound must still cover the library's."""
    H, k, d, n = 2, 3, 24, 6
    heads = MultiHead.from_projections(*(torch.randn(3, H, k, d, generator=gen)), torch.randn(H, 5, k, generator=gen))
    X = ball_tokens(2, n, d, 2.0, seed=4)
    fast = multihead_data_bound(X, heads)
    exact = multihead_data_bound(X, heads.to(F64))
    assert bool((fast >= exact * (1 - 1e-9)).all()) and torch.allclose(fast, exact, rtol=1e-4)


@pytest.mark.parametrize("biased", [False, True])
def test_sharpened_theorem_e_3_bounds_the_dense_constant_and_the_data_bound(gen: torch.Generator, biased: bool) -> None:
    """Theorem E.3 sharpened (chapters 3, 8): above Theorem C.3 and the dense constant on B_R^n, below E.3."""
    d, n, R = 4, 5, 1.5
    A, V = torch.randn(2, d, d, generator=gen, dtype=torch.float64) / d**0.5
    c = torch.randn(d, generator=gen, dtype=torch.float64) if biased else None
    X = torch.cat([ball_tokens(4, n, d, R, seed=3), lemma_c_7_input(A, R, n)])
    heads = MultiHead(A=A[None], V=V[None], W=torch.eye(d, dtype=torch.float64)[None],
                      score_bias=None if c is None else c[None])
    lip = exact_local_lipschitz(lambda Z: multihead_attention(Z, heads), X)
    sharp = theorem_e_3_sharpened(A, V, R, n, c)
    assert bool((lip <= theorem_c_3(X, A, V, score_bias=c) * (1 + 1e-12)).all())
    assert bool((theorem_c_3(X, A, V, score_bias=c) <= sharp).all()) and sharp <= theorem_e_3(A, V, R, n, c)
    if c is None:
        a, v = torch.linalg.matrix_norm(A, ord=2), torch.linalg.matrix_norm(V, ord=2)
        assert torch.isclose(sharp, math.sqrt(3) * v * (a**2 * R**4 * (n + 1) + n) ** 0.5, rtol=1e-12)


# ------------------------------------------------------------- Theorem 3.5 sharpened, the two-Dirac constant, log forms


@pytest.mark.parametrize("case", ["positive", "negative"])
def test_two_dirac_constant_and_sharpened_bound(case: str) -> None:
    A = torch.diag(torch.tensor([1.0, -0.5, 0.2], dtype=F64))
    V = torch.eye(3, dtype=F64)
    g = 1.0 / 8 if case == "positive" else 0.5
    R = torch.sqrt(torch.tensor([10.0, 30.0, 100.0], dtype=F64) / g)
    X, w = proposition_3_6_measure(A, R, case=case)
    lip = weighted_attention_lipschitz(X, A, V, w)
    assert torch.allclose(lip, two_dirac_constant(g, R), rtol=1e-6)
    assert bool((lip <= theorem_3_5_sharpened(A, V, R)).all())
    assert bool((theorem_3_5_sharpened(A, V, R) <= theorem_3_5(A, V, R)).all())


def test_log_forms_of_theorem_3_5_match_and_stay_finite() -> None:
    """Theorem 3.5 and our sharpening in logarithms (chapter 6): the log of the direct forms, finite beyond."""
    A, V = torch.diag(torch.tensor([1.0, -0.5, 0.2], dtype=F64)), 2 * torch.eye(3, dtype=F64)
    R = torch.tensor([0.0, 0.5, 3.0, 10.0], dtype=F64)
    assert torch.allclose(log_theorem_3_5(A, V, R), theorem_3_5(A, V, R).log(), rtol=1e-12)
    assert torch.allclose(log_theorem_3_5_sharpened(A, V, R), theorem_3_5_sharpened(A, V, R).log(), rtol=1e-12)
    huge = torch.tensor([1e3], dtype=F64)
    assert bool(torch.isfinite(log_theorem_3_5(A, V, huge)).all())
    assert not bool(torch.isfinite(theorem_3_5(A, V, huge)).all())


# --------------------------------------------------------------------------- Theorem 4.4 (corrected) and Hardy's lemma


def _cesaro(n: int) -> torch.Tensor:
    return torch.tril(torch.ones(n, n, dtype=F64)) / torch.arange(1, n + 1, dtype=F64)[:, None]


def test_stated_theorem_4_4_fails_at_a_equals_zero(gen: torch.Generator) -> None:
    """Two atoms, A = 0: the W_c ratio is ||C_2|| ||V|| ≈ 1.144 ||V||, above Theorem 3.5's ||V||."""
    _, V = random_attention_params(gen)
    A0 = torch.zeros(3, 3, dtype=F64)
    e = torch.linalg.svd(_cesaro(2)).Vh[0][:, None] * torch.linalg.svd(V).Vh[0]
    X = torch.randn(1, 2, 3, generator=gen, dtype=F64)
    ratio = masked_mean_field_ratio(X, X + 1e-3 * e, torch.arange(2), A0, V).item()
    v = torch.linalg.matrix_norm(V, ord=2).item()
    assert ratio == pytest.approx(math.sqrt((3 + math.sqrt(5)) / 4) * v, rel=1e-10)
    assert ratio > bounds.theorem_3_5(A0, V, 1.0).item()
    assert masked_mean_field_bound(A0, V, 1.0).item() == pytest.approx(2 * v, rel=1e-14)


def test_corrected_bound_is_at_most_twice_theorem_3_5(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen)
    R = torch.linspace(0, 3, 31, dtype=F64)
    corrected, stated = masked_mean_field_bound(A, V, R), bounds.theorem_3_5(A, V, R)
    assert bool((corrected >= stated).all() and (corrected <= 2 * stated * (1 + 1e-14)).all())


@given(st.integers(0, 10_000), st.integers(1, 40))
def test_weighted_hardy_inequality(seed: int, K: int) -> None:
    """Our Hardy lemma: the weighted causal-average operator has norm <= 2 on l²(w), for any weights."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(K, generator=g, dtype=F64) + 1e-3
    W = w.cumsum(0)
    T = torch.tril(w.expand(K, K)) / W[:, None]                           # (T D)_k = Σ_{l<=k} w_l D_l / W_k
    root = w.sqrt()
    assert torch.linalg.matrix_norm(root[:, None] * T / root[None, :], ord=2).item() <= 2 + 1e-12


def test_cesaro_norms_increase_towards_two() -> None:
    norms = torch.stack([torch.linalg.matrix_norm(_cesaro(n), ord=2) for n in (1, 2, 8, 64, 512)])
    assert bool((norms.diff() > 0).all() and (norms < 2).all()) and norms[-1].item() > 1.7


@pytest.mark.parametrize("R", [0.1, 0.5, 1.0])
def test_corrected_bound_holds_on_random_pairs_and_worst_directions(gen: torch.Generator, R: float) -> None:
    A, V = random_attention_params(gen)
    pos = torch.arange(4).repeat_interleave(3)
    X = ball_tokens(4, 12, 3, R, seed=7)
    Y = X + 0.2 * R * torch.randn(X.shape, generator=gen, dtype=F64)
    Y = Y * (R / Y.norm(dim=-1, keepdim=True)).clamp(max=1.0)
    bound = masked_mean_field_bound(A, V, R).item()
    assert bool((masked_mean_field_ratio(X, Y, pos, A, V) <= bound).all())
    res = local_lipschitz(lambda Z: masked_mean_field(Z, pos, A, V), X, tol=1e-10, detailed=True)
    top = masked_mean_field_ratio(X, X + 1e-6 * R * res.right_vector, pos, A, V)
    assert torch.allclose(top, res.value, rtol=1e-4)
    assert bool((res.value <= bound).all())


# --------------------------------------------------------------------------- flow bounds (chapter 9)


@given(st.integers(0, 10_000))
def test_flow_stays_in_the_ball(seed: int) -> None:
    """Chapter 9: max_i |x_i^k| <= (1 + h ||V||)^k max_i |x_i^0| along the stack, for any A and V."""
    g = torch.Generator().manual_seed(seed)
    A, V = random_attention_params(g)
    A, V = 3 * A, 2 * V
    X0 = torch.randn(1, 7, 3, generator=g, dtype=F64)
    traj = attention_flow(X0, A, V, 2.0, 40)
    R = flow_radius_bound(X0.norm(dim=-1).max(), V, 2.0, 40)
    assert bool((traj.norm(dim=-1).amax((1, 2)) <= R * (1 + 1e-12)).all())
    assert R[-1].item() <= math.exp(2.0 * torch.linalg.matrix_norm(V, ord=2).item()) * R[0].item() * (1 + 1e-12)


def test_gronwall_bounds_hold_on_simulated_pairs(gen: torch.Generator) -> None:
    A, V = random_attention_params(gen)
    n, T, L = 6, 2.0, 50
    X0 = ball_tokens(1, n, 3, 1.0, seed=3)
    Y0 = X0 + 1e-3 * torch.randn(X0.shape, generator=gen, dtype=F64)
    r0 = max(X0.norm(dim=-1).max().item(), Y0.norm(dim=-1).max().item())
    tx, ty = attention_flow(X0, A, V, T, L), attention_flow(Y0, A, V, T, L)
    log_div = ((ty - tx).flatten(1).norm(dim=1) / (Y0 - X0).norm()).log()
    log_theorem = flow_gronwall_log(A, V, r0, n, T, L)
    assert log_theorem[0].item() == 0 and bool((log_theorem.diff() > 0).all())
    assert bool((log_div <= log_theorem + 1e-10).all())
    mid = (tx[:-1, 0] + ty[:-1, 0]) / 2
    lam = torch.stack([torch.linalg.matrix_norm(flow_jacobians(Z, A, V), ord=2)
                       for Z in (tx[:-1, 0], ty[:-1, 0], mid)]).amax(0)
    log_measured = flow_gronwall_log(A, V, r0, n, T, L, step_constants=lam)
    assert bool((log_div <= log_measured + 1e-10).all() and (log_measured <= log_theorem + 1e-10).all())
