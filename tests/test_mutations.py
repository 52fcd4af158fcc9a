"""Mutation test: every bound and estimator the book relies on is guarded by a check that can fail.

Each mutation replaces one public function of ``lipnb`` (with ``monkeypatch``) by a wrong version: the
result scaled by 0.5 or 2, ``A`` swapped for ``Aᵀ``, the value bias dropped, a term dropped. For each
mutation, ``MUTATIONS`` names the *catchers*: small checks, defined below, that mirror an assertion of a
chapter (the chapter and check are in each catcher's docstring) and compare against an independent
computation (dense float64 Jacobians, autograd, a closed form computed here, or the largest constant an
adversarial input reaches, with the ratio asserted in a band). The test asserts that every catcher listed
raises ``AssertionError`` under the mutation, and ``test_catchers_pass`` that each passes without it.

A mutation that no check catches is a finding: it means a chapter's assertion could not fail. The
mutations below that needed a new check when this test was written (issue 12) are marked ``new check``.
Everything is float64 and small, so the whole module runs in seconds.

``SOURCE_MUTATIONS`` go further: each edits one line inside an implementation (the closed-form Jacobian
products of ``MultiHeadMap``, the Krylov solvers, a sweep), recompiles it from its source, and runs the
chapter's own cells (read from ``book/NN_name.md``) up to the cell holding the check that must fail; the
test asserts that this check, printed by ``lipnb.report.check``, fails.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import jupytext
import matplotlib.pyplot as plt
import pytest
import torch
from conftest import mutation_tests

from lipnb.core import attention, bounds, dense, flow, inputs, jacobian, krylov, lipschitz, measures, normalization
from lipnb.experiments import real_text

f64 = torch.float64


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _head(d: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _generator(seed)
    return torch.randn(d, d, generator=g, dtype=f64) / d**0.5, torch.randn(d, d, generator=g, dtype=f64) / d**0.5


def _softmax_attention(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Def 2.1 written out here, independently of lipnb: ``sum_j softmax_j(<A x_i, x_j>) V x_j``."""
    scores = torch.einsum("bid,ed,bje->bij", X, A, X)
    return torch.softmax(scores, dim=-1) @ (X @ V.T)


# ----------------------------------------------------------------------------- catchers


def self_attention_matches_formula() -> None:
    """Chapter 1 (the maps): ``self_attention`` equals Def 2.1 written out with ``torch.softmax``."""
    A, V = _head()
    X = torch.randn(3, 5, 4, generator=_generator(1), dtype=f64)
    assert torch.allclose(attention.self_attention(X, A, V), _softmax_attention(X, A, V), atol=1e-12)


def lemma_c_2_matches_autograd() -> None:
    """Chapter 1 (the Jacobian by hand): Lemma C.2's JVP equals forward-mode autograd of Def 2.1."""
    A, V = _head()
    X, E = torch.randn(2, 2, 5, 4, generator=_generator(2), dtype=f64)
    _, expected = torch.func.jvp(lambda Z: _softmax_attention(Z, A, V), (X,), (E,))
    assert torch.allclose(jacobian.lemma_c_2_jvp(X, A, V, E), expected, atol=1e-12)


def local_lipschitz_matches_svd() -> None:
    """Chapter 1 (computing ||D_X f||): ``local_lipschitz`` equals the dense float64 SVD to 1e-6."""
    A, V = _head()
    X = 2 * torch.randn(3, 5, 4, generator=_generator(3), dtype=f64)

    def fn(Z: torch.Tensor) -> torch.Tensor:
        return _softmax_attention(Z, A, V)

    svd = torch.linalg.matrix_norm(
        torch.func.vmap(torch.func.jacrev(lambda x: fn(x[None])[0]))(X).flatten(1, 2).flatten(2), ord=2
    )
    assert torch.allclose(lipschitz.local_lipschitz(fn, X, tol=1e-10), svd, rtol=1e-6)
    assert torch.allclose(dense.exact_local_lipschitz(fn, X), svd, rtol=1e-10)


def terms_add_up_to_jacobian() -> None:
    """Chapter 3 (the proof term by term): ``T_1 + T_2 + T_3`` is the dense Jacobian (``V = I``)."""
    A, _ = _head()
    X = torch.randn(2, 4, 4, generator=_generator(4), dtype=f64)
    J = dense.jacobian_matrix(lambda Z: _softmax_attention(Z, A, torch.eye(4, dtype=f64)), X)
    assert torch.allclose(jacobian.lemma_c_2_term_matrices(X, A).sum(1), J, atol=1e-12)


def bounds_match_closed_forms() -> None:
    """Chapters 3, 6, 8: Theorems 3.3, 3.5, E.3 and Lemma 3.8 equal their formulas, written out here."""
    A, V = _head()
    a, v, R, n = torch.linalg.matrix_norm(A, ord=2), torch.linalg.matrix_norm(V, ord=2), 1.7, 9
    c = torch.randn(4, generator=_generator(5), dtype=f64)
    assert torch.isclose(
        bounds.theorem_3_3(A, V, R, n), 3**0.5 * v * (a**2 * R**4 * (4 * n + 1) + n) ** 0.5, rtol=1e-12
    )
    assert torch.isclose(bounds.theorem_3_5(A, V, R), v * (1 + 3 * a * R**2) * torch.exp(2 * a * R**2), rtol=1e-12)
    e3 = 3**0.5 * v * (a**2 * R**4 + 4 * n * R**2 * (a * R + c.norm()) ** 2 + n) ** 0.5
    assert torch.isclose(bounds.theorem_e_3(A, V, R, n, c), e3, rtol=1e-12)
    sharp = 3**0.5 * v * (a**2 * R**4 + n * R**2 * (a * R + c.norm()) ** 2 + n) ** 0.5
    assert torch.isclose(bounds.theorem_e_3_sharpened(A, V, R, n, c), sharp, rtol=1e-12)
    log_sharp = torch.log(v) + torch.log(1 + 2 * a * R**2 + a * R**2 * torch.exp(-a * R**2)) + a * R**2
    assert torch.isclose(bounds.log_theorem_3_5_sharpened(A, V, R), log_sharp, rtol=1e-12)
    assert torch.isclose(bounds.log_theorem_3_5(A, V, R), bounds.theorem_3_5(A, V, R).log(), rtol=1e-12)
    heads = attention.MultiHead(A=torch.stack([A, 2 * A]), V=torch.stack([V, V]), W=torch.stack([V, 3 * V]))
    per_head = torch.stack([bounds.theorem_3_3(A, V, R, n), bounds.theorem_3_3(2 * A, V, R, n)])
    expected = torch.linalg.matrix_norm(heads.W, ord=2) @ per_head
    assert torch.isclose(bounds.multihead_bound(heads, R, n), expected, rtol=1e-12)


def theorem_c3_chain_and_tightness() -> None:
    """Chapter 3 (a bound at a given input): ``Lip_X <= C.3 <= sharper``; C.3 nearly attained at Lemma C.7's input."""
    A = inputs.random_head(8, seed=0)
    V = torch.eye(8, dtype=f64)
    R, n = math.sqrt(6 / bounds.gamma(A).item()), 6
    X = torch.cat([inputs.lemma_c_7_input(A, R, n), inputs.ball_tokens(3, n, 8, R, seed=1)])
    lip = dense.exact_local_lipschitz(lambda Z: _softmax_attention(Z, A, V), X)
    c3 = bounds.theorem_c_3(X, A, V)
    sharper = 3**0.5 * (torch.linalg.matrix_norm(A, ord=2) ** 2 * R**4 * (n + 1) + n) ** 0.5
    assert bool((lip <= c3 * (1 + 1e-12)).all() and (c3 <= sharper).all())
    assert 0.5 <= (lip[0] / c3[0]).item() <= 1


def lemma_c7_attained() -> None:
    """Chapter 4 (measured constants against the lower bound): exact >= both lower bounds, which are attained at
    saturation in the negative case; in the positive case the outlier copies itself and the ratio tends to
    ``sqrt(n / (n - 1))`` (chapter 4's ``m_n = n``)."""
    A = torch.diag(torch.tensor([0.9, 0.4, -0.2, -0.7], dtype=f64))
    radii = torch.tensor([1.0, 3.0, 12.0], dtype=f64)
    for case, lam in (("positive", 0.9), ("negative", -0.7)):
        exact = dense.exact_local_lipschitz(
            lambda Z: _softmax_attention(Z, A, torch.eye(4, dtype=f64)), inputs.lemma_c_7_input(A, radii, 5, case=case)
        )
        for lower in (bounds.lemma_c_7(lam, radii, 5), bounds.lemma_c_7_sharpened(lam, radii, 5)):
            ratio = exact / lower
            limit = 1.0 if case == "negative" else math.sqrt(5 / 4)
            assert bool((ratio >= 1 - 1e-12).all()) and abs(ratio[-1].item() / limit - 1) < 1e-3


def proposition_3_4_attained() -> None:
    """Chapter 4 (Proposition 3.4): exact >= the bound at the chosen case, attained at saturation (negative case)."""
    A = torch.diag(torch.tensor([0.9, 0.4, -0.2, -0.7], dtype=f64))
    radii = torch.tensor([1.0, 6.0], dtype=f64)
    exact = dense.exact_local_lipschitz(
        lambda Z: _softmax_attention(Z, A, torch.eye(4, dtype=f64)), inputs.lemma_c_7_input(A, radii, 5)
    )
    ratio = exact / bounds.proposition_3_4(A, radii, 5)
    assert bool((ratio >= 1 - 1e-12).all()) and ratio[-1] < 1 + 1e-6


def gamma_from_full_spectrum() -> None:
    """Chapter 4 (γR² of a trained model, new check): ``bounds.gamma`` equals ``max(γ_1/8, -γ_d)`` from ``eigvals``."""
    A, _ = _head(5, seed=6)
    values = torch.linalg.eigvals(A)
    real = values.real[values.imag.abs() < 1e-9]
    assert torch.isclose(bounds.gamma(A), torch.maximum(real.max() / 8, -real.min()), rtol=1e-12)


def theorem_3_7_limit_reached() -> None:
    """Chapter 5 (the limit norm): at a large radius ``Lip_{RX}`` equals ``||V|| sqrt(max_j c_j)``."""
    A, V = _head(seed=7)
    X = torch.nn.functional.normalize(torch.randn(1, 6, 4, generator=_generator(8), dtype=f64), dim=-1)
    R = (40 / jacobian.score_gaps(X, A).min()).sqrt()
    lip = dense.exact_local_lipschitz(lambda Z: _softmax_attention(Z, A, V), R * X)
    assert torch.allclose(lip, bounds.theorem_3_7_limit(X, A, V), rtol=1e-9)


def two_dirac_closed_form() -> None:
    """Chapter 6 (two Diracs): the weighted norm at Proposition C.8's measure is ``(1+γR²)e^{γR²}/2`` to 1e-8."""
    A = -torch.eye(3, dtype=f64)
    R = torch.tensor([10.0, 20.0], dtype=f64).sqrt()
    X, w = inputs.proposition_3_6_measure(A, R, case="negative")
    lip = measures.weighted_attention_lipschitz(X, A, torch.eye(3, dtype=f64), w)
    assert torch.allclose(lip, bounds.two_dirac_constant(1.0, R), rtol=1e-8)


def sharpened_theorem_3_5_reached() -> None:
    """Chapter 6 (the exponent ||A||R² is right): ``A = -I``: the two-Dirac constant is a quarter of the bound."""
    A, eye = -torch.eye(3, dtype=f64), torch.eye(3, dtype=f64)
    R = torch.tensor([300.0], dtype=f64).sqrt()
    X, w = inputs.proposition_3_6_measure(A, R, case="negative")
    ratio = measures.weighted_attention_lipschitz(X, A, eye, w) / bounds.theorem_3_5_sharpened(A, eye, R)
    assert abs(ratio.item() - 0.25) < 0.01


def uniform_weights_give_local_constant() -> None:
    """Chapter 6 (Lemma 3.2, new check): with uniform weights the weighted norm is ``Lip_X(f)``."""
    A, V = _head(3, seed=9)
    X = torch.randn(2, 5, 3, generator=_generator(10), dtype=f64)
    w = torch.full((5,), 0.2, dtype=f64)
    weighted = dense.weighted_operator_norm(lambda Z: attention.self_attention(Z, A, V, weights=w), X, w)
    assert torch.allclose(
        weighted, dense.exact_local_lipschitz(lambda Z: _softmax_attention(Z, A, V), X), rtol=1e-10
    )


def cesaro_pairs_against_corrected_bound() -> None:
    """Chapter 7 (Theorem 4.4 corrected): Cesàro pairs at ``A = 0``: below the bound, at 0.7 of it."""
    A, V = torch.zeros(3, 3, dtype=f64), torch.eye(3, dtype=f64)
    n = 32
    C = torch.tril(torch.ones(n, n, dtype=f64)) / torch.arange(1, n + 1, dtype=f64)[:, None]
    e = torch.linalg.svd(C).Vh[0][:, None] * torch.tensor([1.0, 0.0, 0.0], dtype=f64)
    X0 = inputs.ball_tokens(1, n, 3, 0.5, seed=n)
    ratio = measures.masked_mean_field_ratio(X0, X0 + 1e-4 * e, torch.arange(n), A, V).item()
    corrected = bounds.masked_mean_field_bound(A, V, 1.0).item()
    assert 0.7 * corrected <= ratio <= corrected


def value_bias_enters_the_output() -> None:
    """Chapter 8 (biases): ``multihead_attention`` equals the layer written out with its biases."""
    g = _generator(11)
    H, k, d = 2, 3, 4
    Q, K, Vp = torch.randn(3, H, k, d, generator=g, dtype=f64)
    W = torch.randn(H, d, k, generator=g, dtype=f64)
    qb, vb = torch.randn(2, H, k, generator=g, dtype=f64)
    ob = torch.randn(d, generator=g, dtype=f64)
    heads = attention.MultiHead.from_projections(Q, K, Vp, W, q_bias=qb, v_bias=vb, o_bias=ob)
    X = torch.randn(2, 5, d, generator=g, dtype=f64)
    queries = torch.einsum("bnd,hkd->bhnk", X, Q) + qb[:, None]
    keys = torch.einsum("bnd,hkd->bhnk", X, K)
    values = torch.einsum("bnd,hkd->bhnk", X, Vp) + vb[:, None]
    P = torch.softmax(queries @ keys.mT / k**0.5, dim=-1)
    expected = torch.einsum("bhnk,hek->bne", P @ values, W) + ob
    assert torch.allclose(attention.multihead_attention(X, heads), expected, atol=1e-12)


def normalization_radius_matches_scan() -> None:
    """Chapter 2 (where the outputs live): the exact radius equals a scan of the circle ``S`` in ``d = 3``."""
    gamma, beta = torch.tensor([0.3, 1.0, 0.6], dtype=f64), torch.tensor([0.5, -0.2, 0.4], dtype=f64)
    e1 = torch.tensor([1.0, -1.0, 0.0], dtype=f64) / 2**0.5
    e2 = torch.tensor([1.0, 1.0, -2.0], dtype=f64) / 6**0.5
    theta = torch.linspace(0, 2 * math.pi, 20001, dtype=f64)
    circle = 3**0.5 * (theta.cos()[:, None] * e1 + theta.sin()[:, None] * e2)
    scan = (beta + gamma * circle).norm(dim=1).max()
    R, _ = normalization.normalization_radius(gamma, beta)
    assert abs(R - scan) < 1e-6
    assert torch.isclose(
        normalization.normalization_radius_bound(gamma, beta), 3**0.5 * gamma.max() + beta.norm(), rtol=1e-12
    )


def gronwall_product_matches_sum() -> None:
    """Chapter 9 (Grönwall estimates, new check): ``flow_gronwall_log`` equals the cumulative sum of ``log(1 + hΛ)``."""
    A, V = torch.eye(2, dtype=f64), torch.eye(2, dtype=f64)
    T, L, r0, n = 1.0, 10, 1.5, 4
    h = T / L
    R = r0 * (1 + h) ** torch.arange(L, dtype=f64)
    steps = torch.minimum(bounds.theorem_3_3(A, V, R, n), bounds.theorem_3_5(A, V, R))
    expected = torch.cat([torch.zeros(1, dtype=f64), torch.log1p(h * steps).cumsum(0)])
    assert torch.allclose(bounds.flow_gronwall_log(A, V, r0, n, T, L), expected, rtol=1e-12)
    assert torch.allclose(
        bounds.flow_radius_bound(r0, V, T, L), r0 * (1 + h) ** torch.arange(L + 1, dtype=f64), rtol=1e-12
    )


def euler_stack_matches_layers() -> None:
    """Chapter 9 (from depth to time): ``attention_flow`` equals the residual stack computed layer by layer."""
    A, V = _head(2, seed=12)
    X = torch.randn(1, 5, 2, generator=_generator(13), dtype=f64)
    states, h = [X], 0.1
    for _ in range(10):
        states.append(states[-1] + h * _softmax_attention(states[-1], A, V))
    assert torch.allclose(flow.attention_flow(X, A, V, 1.0, 10)[-1], states[-1], rtol=1e-12)


CATCHERS: list[Callable[[], None]] = [
    self_attention_matches_formula,
    lemma_c_2_matches_autograd,
    local_lipschitz_matches_svd,
    terms_add_up_to_jacobian,
    bounds_match_closed_forms,
    theorem_c3_chain_and_tightness,
    lemma_c7_attained,
    proposition_3_4_attained,
    gamma_from_full_spectrum,
    theorem_3_7_limit_reached,
    two_dirac_closed_form,
    sharpened_theorem_3_5_reached,
    uniform_weights_give_local_constant,
    cesaro_pairs_against_corrected_bound,
    value_bias_enters_the_output,
    normalization_radius_matches_scan,
    gronwall_product_matches_sum,
    euler_stack_matches_layers,
]


# ----------------------------------------------------------------------------- mutations


def _scaled(factor: float) -> Callable[[Callable], Callable]:
    return lambda original: lambda *args, **kwargs: original(*args, **kwargs) * factor


def _transposed_a(original: Callable) -> Callable:
    """``A -> Aᵀ`` in the second argument (every attention map and Jacobian of lipnb takes ``(X, A, ...)``)."""
    return lambda X, A, *args, **kwargs: original(X, A.mT, *args, **kwargs)


def _without_value_bias(original: Callable) -> Callable:
    return lambda X, heads, **kwargs: original(X, dataclasses.replace(heads, value_bias=None), **kwargs)


def _radius_scaled(original: Callable) -> Callable:
    def mutated(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        R, z = original(*args, **kwargs)
        return 0.5 * R, z

    return mutated


def _drifting(original: Callable) -> Callable:
    """A small error per step (``10⁻³`` per layer) added to the logarithm of the Grönwall product."""

    def mutated(*args: object, **kwargs: object) -> torch.Tensor:
        logs = original(*args, **kwargs)
        return logs - torch.arange(len(logs), dtype=logs.dtype) * 1e-3

    return mutated


MUTATIONS: dict[str, tuple[object, str, Callable[[Callable], Callable], list[Callable[[], None]]]] = {
    # name: (module, function, mutation, catchers that must fail)
    "self_attention uses Aᵀ": (attention, "self_attention", _transposed_a, [uniform_weights_give_local_constant]),
    "attention_matrix uses Aᵀ": (
        attention,
        "attention_matrix",
        _transposed_a,
        [self_attention_matches_formula, value_bias_enters_the_output],
    ),
    "lemma_c_2_jvp uses Aᵀ": (jacobian, "lemma_c_2_jvp", _transposed_a, [lemma_c_2_matches_autograd]),
    "multihead_attention drops the value bias": (
        attention,
        "multihead_attention",
        _without_value_bias,
        [value_bias_enters_the_output],
    ),
    "local_lipschitz x0.5": (lipschitz, "local_lipschitz", _scaled(0.5), [local_lipschitz_matches_svd]),
    "local_lipschitz x2": (lipschitz, "local_lipschitz", _scaled(2.0), [local_lipschitz_matches_svd]),
    "exact_local_lipschitz x2": (
        dense,
        "exact_local_lipschitz",
        _scaled(2.0),
        [local_lipschitz_matches_svd, theorem_c3_chain_and_tightness, lemma_c7_attained],
    ),
    "weighted_operator_norm x2": (
        dense,
        "weighted_operator_norm",
        _scaled(2.0),
        [uniform_weights_give_local_constant],
    ),
    "lemma_c_2_term_matrices uses Aᵀ": (jacobian, "lemma_c_2_term_matrices", _transposed_a, [terms_add_up_to_jacobian]),
    "theorem_3_3 x0.5": (bounds, "theorem_3_3", _scaled(0.5), [bounds_match_closed_forms]),
    "theorem_3_3 x2": (bounds, "theorem_3_3", _scaled(2.0), [bounds_match_closed_forms]),
    "theorem_e_3 x0.5": (bounds, "theorem_e_3", _scaled(0.5), [bounds_match_closed_forms]),
    "lemma_3_8 x0.5": (bounds, "lemma_3_8", _scaled(0.5), [bounds_match_closed_forms]),
    "theorem_3_5 x0.5": (bounds, "theorem_3_5", _scaled(0.5), [bounds_match_closed_forms]),
    "theorem_e_3_sharpened x0.5": (bounds, "theorem_e_3_sharpened", _scaled(0.5), [bounds_match_closed_forms]),
    "log_theorem_3_5_sharpened + 1": (
        bounds,
        "log_theorem_3_5_sharpened",
        lambda original: lambda *args, **kwargs: original(*args, **kwargs) + 1,
        [bounds_match_closed_forms],
    ),
    "theorem_c_3 x0.5": (bounds, "theorem_c_3", _scaled(0.5), [theorem_c3_chain_and_tightness]),
    "theorem_c_3 x2": (bounds, "theorem_c_3", _scaled(2.0), [theorem_c3_chain_and_tightness]),
    "lemma_c_7 x0.5": (bounds, "lemma_c_7", _scaled(0.5), [lemma_c7_attained]),
    "lemma_c_7 x2": (bounds, "lemma_c_7", _scaled(2.0), [lemma_c7_attained]),
    "lemma_c_7_sharpened x0.5": (bounds, "lemma_c_7_sharpened", _scaled(0.5), [lemma_c7_attained]),
    "proposition_3_4 x0.5": (bounds, "proposition_3_4", _scaled(0.5), [proposition_3_4_attained]),
    "proposition_3_4 x2": (bounds, "proposition_3_4", _scaled(2.0), [proposition_3_4_attained]),
    "gamma x2": (bounds, "gamma", _scaled(2.0), [gamma_from_full_spectrum]),
    "theorem_3_7_limit x2": (bounds, "theorem_3_7_limit", _scaled(2.0), [theorem_3_7_limit_reached]),
    "two_dirac_constant x0.5": (bounds, "two_dirac_constant", _scaled(0.5), [two_dirac_closed_form]),
    "two_dirac_constant x2": (bounds, "two_dirac_constant", _scaled(2.0), [two_dirac_closed_form]),
    "theorem_3_5_sharpened x0.5": (bounds, "theorem_3_5_sharpened", _scaled(0.5), [sharpened_theorem_3_5_reached]),
    "theorem_3_5_sharpened x2": (bounds, "theorem_3_5_sharpened", _scaled(2.0), [sharpened_theorem_3_5_reached]),
    "masked_mean_field_bound x0.5": (
        bounds,
        "masked_mean_field_bound",
        _scaled(0.5),
        [cesaro_pairs_against_corrected_bound],
    ),
    "masked_mean_field_bound x2": (
        bounds,
        "masked_mean_field_bound",
        _scaled(2.0),
        [cesaro_pairs_against_corrected_bound],
    ),
    "normalization_radius x0.5": (
        normalization,
        "normalization_radius",
        _radius_scaled,
        [normalization_radius_matches_scan],
    ),
    "normalization_radius_bound x0.5": (
        normalization,
        "normalization_radius_bound",
        _scaled(0.5),
        [normalization_radius_matches_scan],
    ),
    "flow_gronwall_log drifts": (bounds, "flow_gronwall_log", _drifting, [gronwall_product_matches_sum]),
    "flow_radius_bound x2": (bounds, "flow_radius_bound", _scaled(2.0), [gronwall_product_matches_sum]),
    "attention_flow x2": (flow, "attention_flow", _scaled(2.0), [euler_stack_matches_layers]),
}


test_catchers_pass, test_mutation_is_caught = mutation_tests(CATCHERS, MUTATIONS)


# ----------------------------------------------------------------------------- source mutations

BOOK = Path(__file__).resolve().parents[1] / "book"


def _recompiled(owner: object, name: str, old: str, new: str) -> Callable:
    """``owner.name`` (a function of a module, or a method of a class) recompiled from its source with the one
    occurrence of ``old`` replaced by ``new``, in its module's namespace."""
    func = inspect.getattr_static(owner, name)
    source = textwrap.dedent(inspect.getsource(func))
    if source.count(old) != 1:
        raise ValueError(f"{name}: {old!r} occurs {source.count(old)} times in its source, not once")
    namespace = dict(vars(sys.modules[func.__module__]))
    exec(compile(source.replace(old, new), inspect.getsourcefile(func), "exec"), namespace)
    return namespace[name]


def run_chapter(name: str, until: str) -> None:
    """Run the code cells of ``book/<name>.md`` in order, in one namespace, through the first cell containing
    ``until``; magics (``%matplotlib``) are skipped."""
    namespace: dict[str, object] = {}
    try:
        for cell in jupytext.read(BOOK / f"{name}.md").cells:
            if cell.cell_type != "code":
                continue
            code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))
            exec(compile(code, f"{name}.md", "exec"), namespace)
            if until in cell.source:
                return
    finally:
        plt.close("all")
    raise ValueError(f"{name}.md has no code cell containing {until!r}")


SOURCE_MUTATIONS: dict[str, tuple[object, str, str, str, str, str]] = {
    # name: (owner, function, old source, new source, chapter, claim of the check that must fail)
    "MultiHeadMap jvp: covariance term with the wrong sign": (
        jacobian.AttentionLinearization, "jvp",
        "dO.sub_(T.sum(-1, keepdim=True) * self.Oh)", "dO.add_(T.sum(-1, keepdim=True) * self.Oh)",
        "10_performance", "mha: the closed form equals the module",
    ),
    "MultiHeadMap vjp: scores' cotangent not centred": (
        jacobian.AttentionLinearization, "vjp",
        "dS.sub_((dO * self.Oh).sum(-1, keepdim=True)).mul_(self.P)", "dS.mul_(self.P)",
        "10_performance", "mha: the closed form equals the module",
    ),
    "lanczos: stops on a residual of 1, whatever the tolerance": (
        krylov, "lanczos",
        "converged = _stops(res, error, tol, rtol) | invariant",
        "converged = _stops(res, error, 1.0, rtol) | invariant",
        "01_self_attention", "along the top singular direction the shortest secant reaches the supremum",
    ),
    "power_iteration: stops on a residual of 1, whatever the tolerance": (
        krylov, "power_iteration",
        "converged = _stops(res, error, tol, rtol) | (th <= 0)",
        "converged = _stops(res, error, 1.0, rtol) | (th <= 0)",
        # the final residual, recomputed after the solver stops, refuses the false stop
        "01_self_attention", "power: every input converged",
    ),
    "real_text_sweep: column sums of P taken over the wrong axis": (
        real_text, "_bound_columns",
        "P.sum(-2).flatten(1)", "P.sum(-1).flatten(1)",
        "03_sqrt_n_bound", "the sink's exponent interval lies above the local constant's",
    ),
}


@pytest.mark.parametrize("name", list(SOURCE_MUTATIONS))
def test_source_mutation_fails_the_chapters_check(name: str, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """Under the edited implementation, the chapter's own check fails (an empty results cache, so no sweep is
    read from a run of the real code)."""
    owner, function, old, new, chapter, claim = SOURCE_MUTATIONS[name]
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setattr(owner, function, _recompiled(owner, function, old, new))
    if owner is krylov:  # lipschitz holds the solvers under its own names
        monkeypatch.setattr(lipschitz, function, getattr(krylov, function))
    with pytest.raises(AssertionError, match=f"check failed: [^|]*{claim}"):
        run_chapter(chapter, claim.split(": ")[-1])
