"""The inputs of :mod:`lipnb.core.inputs` and the behaviour the theory predicts at them.

Lemma C.7 / Proposition 3.4 configurations, Proposition 3.6 two-Dirac measures, Theorem 3.7 generic
inputs (limit ``||V|| √n``), and the App. C.7 null-set input where ``Lip_X f`` grows like ``R²``; also ball
and repeated tokens, head spectra, and the projected ascent of ``maximize_local_lipschitz``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from conftest import random_multihead
from hypothesis import assume, given
from hypothesis.extra.numpy import arrays
from torch import Tensor

from lipnb.core import bounds
from lipnb.core import inputs as adv
from lipnb.core.attention import attention_matrix, self_attention
from lipnb.core.bounds import gamma, theorem_3_7_limit
from lipnb.core.dense import exact_local_lipschitz, weighted_operator_norm
from lipnb.core.inputs import (
    adversarial_case,
    argmax_configuration,
    ball_tokens,
    head_spectra,
    maximize_local_lipschitz,
    repeat_tokens,
)
from lipnb.core.jacobian import MultiHeadMap, score_gaps

F64 = torch.float64
Map = Callable[[Tensor], Tensor]
ROTATION = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=F64)


def diag(*values: float) -> Tensor:
    """``diag(values)`` in float64."""
    return torch.diag(torch.tensor(values, dtype=F64))


def similar(values: list[float], seed: int = 0) -> Tensor:
    """A non-symmetric matrix ``S diag(values) S⁻¹`` with the given real eigenvalues."""
    gen = torch.Generator().manual_seed(seed)
    S = torch.eye(len(values), dtype=F64) + 0.3 * torch.randn(len(values), len(values), generator=gen, dtype=F64)
    return S @ torch.diag(torch.tensor(values, dtype=F64)) @ torch.linalg.inv(S)


def relative_gap(value: Tensor, limit: Tensor) -> list[float]:
    """``|value - limit| / limit`` as a list."""
    return ((value - limit).abs() / limit).tolist()


# --------------------------------------------------------------------------- real eigenpairs, case rule


# Entries below 1e-8 in magnitude are flushed to 0. LAPACK's balanced dgeev (torch, numpy and scipy alike)
# returns eigenvectors with residual O(1) when entries span ~90 orders of magnitude (e.g. a 1.2e-89 next to
# ones); torch.linalg.eig (MKL, torch 2.13 CPU) raises LinAlgError near 1e-250 and has even corrupted the
# heap (abort / segfault) on [[a, t, t], [a, t, t], [t, t, t]] with a = 0.506, t = 5.2e-250.
ENTRIES = st.floats(-3, 3, allow_subnormal=False).map(lambda x: x if abs(x) >= 1e-8 else 0.0)


@given(A=st.integers(1, 4).flatmap(lambda d: arrays(np.float64, (d, d), elements=ENTRIES)).map(torch.from_numpy))
def test_real_eigenpairs_are_eigenpairs(A: Tensor) -> None:
    """``real_eigenpairs``: ``A u = λ u``, ``|u| = 1``, real, sorted descending, as many as numpy finds."""
    eig = np.linalg.eigvals(A.numpy())
    scale = max(float(np.abs(eig).max()), 1e-300)
    n_real = int((np.abs(eig.imag) <= 1e-9 * scale).sum())
    assume(n_real > 0)
    assume(np.all((np.abs(eig.imag) <= 1e-12 * scale) | (np.abs(eig.imag) > 1e-6 * scale)))
    values, vectors = adv.real_eigenpairs(A)
    assert values.shape == (n_real,)
    assert vectors.shape == (A.shape[0], n_real)
    assert bool((values[:-1] >= values[1:]).all())
    torch.testing.assert_close(vectors.norm(dim=0), torch.ones(n_real, dtype=F64))
    assume(scale > 1e-6)
    residual = (A @ vectors - vectors * values).norm(dim=0)
    assert float(residual.max()) <= 1e-8 * scale


def test_real_eigenpairs_skip_complex_pairs_and_follow_dtype() -> None:
    """A rotation block has no real eigenvalue; only the real one is returned, in ``A``'s dtype."""
    A = torch.zeros(3, 3, dtype=torch.float32)
    A[:2, :2] = 2 * ROTATION
    A[2, 2] = 0.5
    values, vectors = adv.real_eigenpairs(A)
    assert values.dtype == vectors.dtype == torch.float32
    torch.testing.assert_close(values, torch.tensor([0.5]))
    torch.testing.assert_close(vectors[:, 0].abs(), torch.tensor([0.0, 0.0, 1.0]))


@pytest.mark.parametrize(("A", "case"), [(diag(9.0, -1.0), "positive"), (diag(8.0, -1.0), "negative"),
                                         (diag(7.0, -1.0), "negative"), (diag(0.1, 0.05), "positive"),
                                         (diag(-0.1, -2.0), "negative")])
def test_adversarial_case_rule(A: Tensor, case: str) -> None:
    """Sec. 5.2 / Prop. 3.4: positive case iff ``γ_1 > -8 γ_d`` (the larger of ``γ_1/8`` and ``-γ_d``)."""
    assert adv.adversarial_case(A) == case


# --------------------------------------------------------------------------- Lemma C.7 configurations


@pytest.mark.parametrize("case", ["positive", "negative"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_lemma_c_7_input_structure(case: str, dtype: torch.dtype) -> None:
    """Lemma C.7: ``(Ru, Ru/2, ..., Ru/2)`` (λ > 0) or ``(-Ru, Ru, ..., Ru)`` (λ < 0), inside ``B_R``."""
    A = similar([1.5, 0.2, -0.8]).to(dtype)
    R = torch.tensor([0.0, 0.5, 3.0])
    n = 4
    X = adv.lemma_c_7_input(A, R, n, case=case)
    assert X.shape == (3, n, 3)
    assert X.dtype == dtype
    values, vectors = adv.real_eigenpairs(A)
    u = vectors[:, 0] if case == "positive" else vectors[:, -1]
    first, rest = (1.0, 0.5) if case == "positive" else (-1.0, 1.0)
    for r, Xr in zip(R.tolist(), X, strict=True):
        torch.testing.assert_close(Xr[0], first * r * u)
        torch.testing.assert_close(Xr[1:], (rest * r * u).expand(n - 1, -1))
        assert float(Xr.norm(dim=-1).max()) <= r * (1 + 1e-6)
    lam = values[0] if case == "positive" else values[-1]
    torch.testing.assert_close(A @ u, lam * u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("values", "case"), [([1.5, 0.2, -0.8], "positive"), ([1.5, 0.2, -0.8], "negative"),
                                              ([0.4, -3.0], "auto"), ([5.0], "auto")])
@pytest.mark.parametrize("n", [2, 5])
def test_lemma_c_7_attention_weight(values: list[float], case: str, n: int) -> None:
    """Lemma C.7: every token ``i >= 2`` gives the first token the weight
    ``p = 1/(1 + (n-1) e^{-λR²/4})`` (λ > 0) or ``1/(1 + (n-1) e^{-2|λ|R²})`` (λ < 0)."""
    A = similar(values)
    R = torch.tensor([0.3, 1.0, 2.0], dtype=F64)
    X = adv.lemma_c_7_input(A, R, n, case=case)
    chosen = adv.adversarial_case(A) if case == "auto" else case
    ev, _ = adv.real_eigenpairs(A)
    lam = float(ev[0] if chosen == "positive" else ev[-1])
    rate = lam / 4 if lam > 0 else 2 * abs(lam)
    p = 1 / (1 + (n - 1) * torch.exp(-rate * R**2))
    P = attention_matrix(X, A)
    torch.testing.assert_close(P[:, 1:, 0], p.view(-1, 1).expand(-1, n - 1), rtol=1e-10, atol=1e-12)
    # and the lower bound of Lemma C.7 is √(n-1) p
    torch.testing.assert_close(bounds.lemma_c_7(lam, R, n), (n - 1) ** 0.5 * p)


# --------------------------------------------------------------------------- Proposition 3.6


@pytest.mark.parametrize(("A", "case", "last_ratio"), [(diag(2.0, -0.1), "positive", 1.4),
                                                       (diag(0.5, -1.0), "negative", 1.1)])
def test_proposition_3_6_measure(A: Tensor, case: str, last_ratio: float) -> None:
    """Proposition 3.6 / C.8: two Diracs with mass ``p = e^{-2γR²}`` on the outlier; the weighted local
    constant (Lemma C.5) approaches ``(γ/2) R² e^{γR²}`` from above as ``R`` grows (leading order)."""
    assert adv.adversarial_case(A) == case
    R = torch.tensor([1.0, 1.5, 2.0, 2.5, 3.0, 3.5], dtype=F64)
    X, w = adv.proposition_3_6_measure(A, R)
    g = bounds.gamma(A)
    torch.testing.assert_close(X, adv.lemma_c_7_input(A, R, 2, case=case))
    torch.testing.assert_close(w, torch.stack([torch.exp(-2 * g * R**2), 1 - torch.exp(-2 * g * R**2)], 1))
    identity = torch.eye(2, dtype=F64)
    local = torch.cat([
        weighted_operator_norm(lambda Z, wi=wi: self_attention(Z, A, identity, weights=wi), X[i:i + 1], wi)
        for i, wi in enumerate(w)
    ])
    ratio = local / bounds._proposition_3_6(A, R)
    assert all(b < a for a, b in itertools.pairwise(ratio.tolist()))
    assert 1.0 <= float(ratio[-1]) <= last_ratio


# --------------------------------------------------------------------------- Theorem 3.7 and App. C.7


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [2, 4, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_theorem_3_7_limit_at_argmax_configuration(seed: int, n: int, masked: bool) -> None:
    """Theorem 3.7 (4.5 masked): at ``argmax_configuration`` the first token is every argmax and
    ``Lip_{X} f -> ||V|| √n`` as ``R`` grows: the gap shrinks and is below 1e-6 (relative) at ``R = 32``."""
    gen = torch.Generator().manual_seed(seed)
    A = similar([1.0, 0.3, -0.5], seed)
    V = torch.randn(3, 3, generator=gen, dtype=F64)
    R = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], dtype=F64)
    X = adv.argmax_configuration(A, R, n, seed=seed)
    torch.testing.assert_close(X.norm(dim=-1).amax(-1), R)
    counts = bounds.argmax_counts(X, A, masked=masked)
    assert counts[:, 0].tolist() == [n] * len(R)
    limit = bounds.theorem_3_7_limit(X, A, V, masked=masked)
    torch.testing.assert_close(limit, torch.linalg.matrix_norm(V, ord=2) * n**0.5 * torch.ones(len(R), dtype=F64))
    gap = relative_gap(exact_local_lipschitz(lambda Z: self_attention(Z, A, V, masked=masked), X), limit)
    assert gap[0] > 1e-3
    assert all(b <= a for a, b in itertools.pairwise(gap))
    assert gap[-1] < 1e-6


def test_argmax_configuration_is_generic_and_seeded() -> None:
    """Theorem 3.7: the jitter puts the input off the null set of ties (unique argmaxes); seeds differ."""
    A = similar([1.0, 0.3, -0.5])
    X = adv.argmax_configuration(A, 1.0, 5, seed=3)
    torch.testing.assert_close(X, adv.argmax_configuration(A, 1.0, 5, seed=3), rtol=0, atol=0)
    assert float((X - adv.argmax_configuration(A, 1.0, 5, seed=4)).abs().max()) > 1e-3
    scores = (X @ A.mT) @ X.mT
    top2 = scores.topk(2, dim=-1).values
    assert float((top2[..., 0] - top2[..., 1]).min()) > 1e-4


def test_theorem_3_7_limit_generic_inputs() -> None:
    """Theorem 3.7 on random inputs: ``Lip_{RX} f -> ||V|| √(max_j #{i : m_i = j})`` (counts not all ``n``)."""
    gen = torch.Generator().manual_seed(8)
    A, V = torch.randn(3, 3, generator=gen, dtype=F64), torch.randn(2, 3, generator=gen, dtype=F64)
    X = torch.randn(6, 4, 3, generator=gen, dtype=F64)
    X = X / X.norm(dim=-1).amax(-1).view(-1, 1, 1)
    limit = bounds.theorem_3_7_limit(X, A, V)
    assert len(set(bounds.argmax_counts(X, A).amax(1).tolist())) > 1
    scores = (X @ A.mT) @ X.mT
    top2 = scores.topk(2, dim=-1).values
    margin = float((top2[..., 0] - top2[..., 1]).min())
    R = (60 / margin) ** 0.5  # every score gap at least 60: e^{-60} is negligible
    gap = relative_gap(exact_local_lipschitz(lambda Z: self_attention(Z, A, V), R * X), limit)
    assert max(gap) < 1e-9


@pytest.mark.parametrize("n", [3, 5])
def test_quadratic_growth_on_the_null_set(n: int) -> None:
    """App. C.7 / Kim et al.: ``x_1 = 0``, other tokens at radius ``R``: ``Lip_X f`` grows like ``R²``
    (``Lip(2R)/Lip(R) -> 4``), far above Theorem 3.7's generic ``||V|| √n``."""
    gen = torch.Generator().manual_seed(n)
    A, V = torch.randn(3, 3, generator=gen, dtype=F64), torch.randn(3, 3, generator=gen, dtype=F64)
    R = torch.tensor([4.0, 8.0, 16.0, 32.0, 64.0], dtype=F64)
    X = adv.quadratic_growth_input(R, n, 3)
    assert X.shape == (len(R), n, 3)
    assert bool((X[:, 0] == 0).all())
    torch.testing.assert_close(X[:, 1:].norm(dim=-1), R.view(-1, 1).expand(-1, n - 1))
    value = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)
    ratios = (value[1:] / value[:-1]).tolist()
    assert abs(ratios[-1] - 4) < 5e-3
    assert abs(ratios[-1] - 4) < abs(ratios[0] - 4)
    assert float(value[-1]) > 100 * float(torch.linalg.matrix_norm(V, ord=2)) * n**0.5
    assert adv.quadratic_growth_input(2.0, n, 3, dtype=torch.float32).dtype == torch.float32


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: adv.real_eigenpairs(ROTATION), "no real eigenvalue"),
        (lambda: adv.lemma_c_7_input(ROTATION, 1.0, 3), "no real eigenvalue"),
        (lambda: adv.adversarial_case(ROTATION), "no real eigenvalue"),
        (lambda: adv.proposition_3_6_measure(ROTATION, 1.0), "no real eigenvalue"),
        (lambda: adv.argmax_configuration(ROTATION, 1.0, 3), "no real eigenvalue"),
        (lambda: adv.real_eigenpairs(torch.ones(2, 3, dtype=F64)), "square"),
        (lambda: adv.real_eigenpairs(torch.ones(2, dtype=F64)), "square"),
        (lambda: adv.real_eigenpairs(diag(1.0, float("nan"))), "NaN or inf"),
        (lambda: adv.lemma_c_7_input(diag(1.0, -1.0), 1.0, 1), "n must be >= 2"),
        (lambda: adv.lemma_c_7_input(diag(1.0, -1.0), -1.0, 3), "R must be >= 0"),
        (lambda: adv.lemma_c_7_input(diag(1.0, -1.0), float("inf"), 3), "finite"),
        (lambda: adv.lemma_c_7_input(diag(1.0, -1.0), 1.0, 3, case="pos"), "case must be"),  # type: ignore[arg-type]
        (lambda: adv.lemma_c_7_input(diag(-1.0, -2.0), 1.0, 3, case="positive"), "positive real eigenvalue"),
        (lambda: adv.lemma_c_7_input(diag(1.0, 2.0), 1.0, 3, case="negative"), "negative real eigenvalue"),
        (lambda: adv.argmax_configuration(diag(-1.0, -2.0), 1.0, 3), "positive real eigenvalue"),
        (lambda: adv.quadratic_growth_input(1.0, 1, 3), "n must be >= 2"),
    ],
    ids=["eig-rotation", "c7-rotation", "case-rotation", "p36-rotation", "argmax-rotation", "eig-not-square",
         "eig-rank-1", "eig-nan", "c7-n1", "c7-negative-R", "c7-inf-R", "c7-bad-case", "c7-no-positive",
         "c7-no-negative", "argmax-no-positive", "quadratic-n1"],
)
def test_bad_input_raises_value_error(call: Callable[[], object], message: str) -> None:
    """Input validation: each bad input raises ``ValueError`` whose message names the problem."""
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------------ ball and repeated tokens, head spectra, the Lipschitz maximizer


def test_maximize_local_lipschitz(gen: torch.Generator) -> None:
    heads = random_multihead(gen, d=3, H=1, k=3)
    f = MultiHeadMap(heads)
    X0 = 2 * torch.randn(3, 4, 3, generator=gen, dtype=F64)
    R = 1.5
    X, best = maximize_local_lipschitz(f, X0, R, steps=20)
    assert bool((X.norm(dim=-1) <= R + 1e-12).all())
    assert torch.allclose(best, exact_local_lipschitz(f, X), rtol=1e-10)
    start = X0 * (R / X0.norm(dim=-1, keepdim=True)).clamp(max=1)
    assert bool((best >= exact_local_lipschitz(f, start) - 1e-12).all())


def test_ball_tokens_lie_in_the_ball() -> None:
    X = ball_tokens(4, 50, 3, 2.5, seed=3)
    assert X.shape == (4, 50, 3) and bool((X.norm(dim=-1) <= 2.5).all())
    assert X.norm(dim=-1).max() > 2.0


@pytest.mark.parametrize("rank", [2, 5])
def test_head_spectra_match_the_dense_eigenvalues(gen: torch.Generator, rank: int) -> None:
    d = 5
    A = torch.stack([torch.randn(d, rank, generator=gen, dtype=F64) @ torch.randn(rank, d, generator=gen, dtype=F64)
                     for _ in range(6)])
    spectra = head_spectra(A)
    for h in range(len(A)):
        assert torch.allclose(spectra.gamma[h], gamma(A[h]), atol=1e-9)
        # The case is a sign: compare it only where the sign is not decided by rounding. A rank-2 head whose
        # non-zero eigenvalues are complex has only zero real eigenvalues, where γ_1 + 8 γ_d is rounding noise
        # (that boundary is tested on its own below).
        top, bottom = spectra.largest[h], spectra.smallest[h]
        if abs(float(top + 8 * bottom)) > 1e-9 * float(torch.linalg.matrix_norm(A[h], 2)):
            assert bool(spectra.positive[h]) == (adversarial_case(A[h]) == "positive")


def test_head_spectra_at_the_sign_boundary() -> None:
    """A rank-2 head whose non-zero eigenvalues are ±i: the only real eigenvalue is 0 (three times), so
    γ = 0 exactly and the positive case (γ_1 > -8 γ_d) does not hold, whatever the rounding of the zeros."""
    A = torch.zeros(5, 5, dtype=F64)
    A[0, 1], A[1, 0] = -1.0, 1.0
    Q = torch.linalg.qr(torch.randn(5, 5, dtype=F64, generator=torch.Generator().manual_seed(0)))[0]
    spectra = head_spectra((Q @ A @ Q.T).unsqueeze(0))
    assert float(spectra.gamma[0]) == 0.0 and not bool(spectra.positive[0])


def test_limit_norm_at_argmax_configuration(gen: torch.Generator) -> None:
    d, n = 3, 6
    A = torch.randn(d, d, generator=gen, dtype=F64)
    A = A + A.T
    V = torch.randn(d, d, generator=gen, dtype=F64)
    X = argmax_configuration(A, 1.0, n)
    limit = theorem_3_7_limit(X, A, V)
    assert torch.allclose(limit, torch.linalg.matrix_norm(V, ord=2) * math.sqrt(n))
    gap = score_gaps(X, A).min().item()
    R = math.sqrt(40 / gap)
    lip = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), R * X)
    assert torch.allclose(lip, limit, rtol=1e-9)


def test_repeat_tokens(gen: torch.Generator) -> None:
    Y = torch.randn(1, 3, 2, generator=gen, dtype=F64)
    X = repeat_tokens(Y, torch.tensor([1, 2, 3]))
    assert X.shape == (1, 6, 2) and torch.equal(X[0, 3], Y[0, 2])
    with pytest.raises(ValueError):
        repeat_tokens(Y, torch.tensor([1, 0, 3]))
