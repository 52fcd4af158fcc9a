"""Every Lipschitz bound of the book, each a function citing its result.

Numbering and constants follow the ICML 2024 version of Castin, Ablin & Peyré, *How Smooth Is Attention?*
(the text in ``shared/seeds``, its formulas restored in ``shared/THEORY.md``). Three kinds live here:
the paper's bounds as stated (``theorem_3_3``, ``theorem_3_5``, ``proposition_3_4`` ...), the book's
sharpened or corrected versions (``*_sharpened``, ``two_dirac_constant``, ``masked_mean_field_bound``),
and the bounds of chapter 9's flow. Upper bounds hold for every input they cover; lower bounds are
attained by the inputs of :mod:`lipnb.core.inputs`. Scalars broadcast: ``R`` and ``n`` may be numbers or
tensors, checked by :mod:`lipnb.arguments` (a negative radius or a non-whole length is a ``ValueError``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..arguments import (
    as_count,
    as_radius,
    as_real,
    check_bool,
    check_broadcast,
    check_float,
    check_matrix,
    check_positive_int,
    check_tokens,
    check_width,
)
from .attention import MultiHead, attention_matrix, scores
from .inputs import real_eigenpairs

__all__ = [
    "argmax_counts",
    "flow_gronwall_log",
    "flow_radius_bound",
    "gamma",
    "lemma_c_7",
    "lemma_c_7_sharpened",
    "log_theorem_3_5",
    "log_theorem_3_5_sharpened",
    "masked_mean_field_bound",
    "multihead_bound",
    "multihead_data_bound",
    "proposition_3_4",
    "theorem_3_3",
    "theorem_3_5",
    "theorem_3_5_sharpened",
    "theorem_3_7_limit",
    "theorem_c_3",
    "theorem_c_3_terms",
    "theorem_e_3",
    "theorem_e_3_sharpened",
    "two_dirac_constant",
]


def _norm2(M: Tensor) -> Tensor:
    if not isinstance(M, Tensor) or not M.is_floating_point():
        raise TypeError(f"expected a floating-point matrix; got {getattr(M, 'dtype', type(M).__name__)}")
    if M.dim() < 2:
        raise ValueError(f"expected a matrix; got {type(M).__name__} of shape {tuple(getattr(M, 'shape', ()))}")
    if not bool(torch.isfinite(M).all()):
        raise ValueError("matrix contains NaN or inf")
    return torch.linalg.matrix_norm(M.double(), ord=2)


def _score_bias_norm(score_bias: Tensor | None, d: int) -> Tensor | float:
    """``|c|`` for a score bias ``c`` of shape ``(d,)`` (0 without one), checked finite and of the right shape."""
    if score_bias is None:
        return 0.0
    if not isinstance(score_bias, Tensor) or not score_bias.is_floating_point():
        raise TypeError(f"score_bias must be a floating-point tensor; got {type(score_bias).__name__}")
    if tuple(score_bias.shape) != (d,):
        raise ValueError(f"score_bias must have shape ({d},); got {tuple(score_bias.shape)}")
    if not bool(torch.isfinite(score_bias).all()):
        raise ValueError("score_bias contains NaN or inf")
    return score_bias.double().norm()


def _check_head(A: Tensor, V: Tensor) -> None:
    """Raise ``ValueError`` unless ``A`` is square ``(d, d)`` and ``V`` is ``(d_v, d)``."""
    for name, M in (("A", A), ("V", V)):
        if not isinstance(M, Tensor) or not M.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor; got {getattr(M, 'dtype', type(M).__name__)}")
    if A.dim() != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square (d, d) matrix; got shape {tuple(A.shape)}")
    if V.dim() != 2 or V.shape[1] != A.shape[0]:
        raise ValueError(f"V must be (d_v, d) with d = {A.shape[0]}; got shape {tuple(V.shape)}")
    for name, M in (("A", A), ("V", V)):
        if not bool(torch.isfinite(M).all()):
            raise ValueError(f"{name} contains NaN or inf")


def _check_heads(heads: object) -> None:
    """``TypeError`` unless ``heads`` is a :class:`~lipnb.core.attention.MultiHead` (e.g. ``models.head_matrices``)."""
    if not isinstance(heads, MultiHead):
        raise TypeError(f"heads must be a lipnb.MultiHead (e.g. lipnb.models.head_matrices); "
                        f"got {type(heads).__name__}")


def theorem_3_3(A: Tensor, V: Tensor, R: float | Tensor, n: int | Tensor) -> Tensor:
    """Theorem 3.3 (and 4.3, masked): ``Lip(f|B_R^n) <= √3 ||V|| (||A||² R⁴ (4n+1) + n)^{1/2}``."""
    return theorem_e_3(A, V, R, n)


def theorem_e_3(A: Tensor, V: Tensor, R: float | Tensor, n: int | Tensor,
                score_bias: Tensor | None = None) -> Tensor:
    """Theorem E.3 (biases): ``√3 ||V|| (||A||² R⁴ + 4n R² (||A|| R + |c|)² + n)^{1/2}``.

    ``c`` is the score bias (scores ``<A x_i + c, x_j>``); the value bias does not enter the
    Jacobian. With ``c = 0`` this is exactly Theorem 3.3.
    """
    _check_head(A, V)
    a, v = _norm2(A), _norm2(V)
    R, n = as_radius(R), as_count(n)
    check_broadcast(R=R, n=n)
    c = _score_bias_norm(score_bias, A.shape[0])
    return math.sqrt(3) * v * torch.sqrt(a**2 * R**4 + 4 * n * R**2 * (a * R + c) ** 2 + n)


def _cov_times_a_norms(X: Tensor, P: Tensor, A: Tensor, eps: float) -> Tensor:
    """An upper bound on ``||Cov_i A||₂`` for every row ``i`` of ``P``, ``(B, n)``, exact up to ``eps``-level terms.

    With ``A = U S Wᵀ`` truncated where ``S < d eps S_1`` (rank ``r``; ``r = k`` for a real head up to
    rounding), ``||Cov_i A|| <= ||Cov_i U_r S_r|| + S_{r+1} tr Cov_i``, and
    ``Cov_i U_r S_r = Σ_j P_ij x_j (S_r U_rᵀ x_j)ᵀ - x̄_i (S_r U_rᵀ x̄_i)ᵀ`` is one ``n x n`` by ``n x dr``
    product whose norm comes from an ``r x r`` Gram matrix: no ``d x d`` covariance is formed.
    """
    B, n, d = X.shape
    U, S, _ = torch.linalg.svd(A)
    r = max(int((S > S[0] * d * eps).sum()), 1)
    Ur = U[:, :r] * S[:r]
    XU = X @ Ur
    outer = (X.unsqueeze(-1) * XU.unsqueeze(-2)).reshape(B, n, d * r)
    xbar = P @ X
    CU = (P @ outer).reshape(B, n, d, r) - xbar.unsqueeze(-1) * (P @ XU).unsqueeze(-2)
    norms = torch.linalg.eigvalsh(CU.mT @ CU)[..., -1].clamp_min(0).sqrt()
    if r == d:
        return norms
    trace = (P * X.square().sum(-1).unsqueeze(1)).sum(-1) - xbar.square().sum(-1)
    return norms + S[r] * trace.clamp_min(0)


def theorem_c_3_terms(X: Tensor, A: Tensor, *, score_bias: Tensor | None = None,
                      masked: bool = False) -> Tensor:
    """Theorem C.3 (our derivation), term by term for ``V = I``: ``(B, 3)`` bounds on the terms of Lemma C.2.

    ``||P||₂``, ``max_i ||Cov_i A||₂`` and ``(max_i |A x_i + c|² tr Cov_i · max_j Σ_i P_ij)^{1/2}``. Singular
    values of ``A`` below ``d eps ||A||`` (``eps`` of ``A``'s dtype: the rounding noise of a low-rank
    ``A = KᵀQ/√k`` stored in float32) enter through ``tr Cov_i`` rather than a ``d x d`` product.
    """
    check_tokens(X)
    eps = torch.finfo(A.dtype).eps
    X, A = X.double(), A.double()
    c = None if score_bias is None else score_bias.double()
    P = attention_matrix(X, A, score_bias=c, masked=masked)
    xbar = P @ X
    trace = (P * X.square().sum(-1).unsqueeze(1)).sum(-1) - xbar.square().sum(-1)
    query = X @ A.mT if c is None else X @ A.mT + c
    spread = (query.square().sum(-1) * trace.clamp_min(0)).amax(1) * P.sum(1).amax(1)
    return torch.stack([torch.linalg.matrix_norm(P, ord=2), _cov_times_a_norms(X, P, A, eps).amax(1),
                        spread.sqrt()], 1)


def theorem_c_3(X: Tensor, A: Tensor, V: Tensor, *, score_bias: Tensor | None = None,
                masked: bool = False) -> Tensor:
    """Theorem C.3 (data-dependent form of Theorem 3.3, our derivation): a bound on ``Lip_X(f)``, ``(B,)``.

    ``||V|| (||P||₂ + max_i ||Cov_i A||₂ + (max_i |A x_i + c|² tr Cov_i · max_j Σ_i P_ij)^{1/2})``,
    each term bounding one term of Lemma C.2 (D.1 when masked, E.2 with a score bias).
    """
    _check_head(A, V)
    return _norm2(V) * theorem_c_3_terms(X, A, score_bias=score_bias, masked=masked).sum(1)


def multihead_data_bound(X: Tensor, heads: MultiHead, *, masked: bool = False) -> Tensor:
    """Lemma 3.8 with Theorem C.3 per head: ``Lip_X(f^MH) <= Σ_h ||W_h V_h||₂ · (head-h terms)``, ``(B,)``."""
    check_tokens(X)
    _check_heads(heads)
    total = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
    for h in range(heads.num_heads):
        c = None if heads.score_bias is None else heads.score_bias[h]
        terms = theorem_c_3_terms(X, heads.A[h], score_bias=c, masked=masked)
        total = total + _norm2(heads.W[h] @ heads.V[h]) * terms.sum(1)
    return total


def _lemma_3_8(W: Tensor, head_constants: Tensor) -> Tensor:
    """Lemma 3.8: ``Lip(f^MH) <= Σ_h ||W_h||₂ Lip(f_h)`` for ``W`` ``(H, d_out, k)``, constants ``(H, ...)``."""
    if isinstance(W, Tensor) and W.dim() != 3:
        raise ValueError(f"W must stack the heads' output maps, shape (H, d_out, k); got {tuple(W.shape)}")
    w = _norm2(W)
    if not isinstance(head_constants, Tensor) or not head_constants.is_floating_point():
        raise TypeError(f"head_constants must be a floating-point tensor; got {type(head_constants).__name__}")
    if head_constants.dim() == 0 or head_constants.shape[0] != len(w):
        raise ValueError(f"head_constants must have one row per head, shape ({len(w)}, ...); "
                         f"got {tuple(head_constants.shape)}")
    if not bool(torch.isfinite(head_constants).all()) or bool((head_constants < 0).any()):
        raise ValueError("head_constants must be finite Lipschitz constants >= 0")
    return torch.einsum("h,h...->...", w, head_constants.double())


def multihead_bound(heads: MultiHead, R: float | Tensor, n: int | Tensor) -> Tensor:
    """Lemma 3.8 with Theorem E.3 per head: a bound on ``Lip(f^MH | B_R^n)`` for a real layer."""
    _check_heads(heads)
    per_head = torch.stack([
        theorem_e_3(heads.A[h], heads.V[h], R, n,
                    None if heads.score_bias is None else heads.score_bias[h])
        for h in range(heads.num_heads)
    ])
    return _lemma_3_8(heads.W, per_head)


def theorem_3_5(A: Tensor, V: Tensor, R: float | Tensor) -> Tensor:
    """Theorem 3.5 / Equation (1): ``||V|| (1 + 3 ||A|| R²) exp(2 ||A|| R²)``, for every ``n``."""
    _check_head(A, V)
    a, v, R = _norm2(A), _norm2(V), as_radius(R)
    return v * (1 + 3 * a * R**2) * torch.exp(2 * a * R**2)


def gamma(A: Tensor) -> Tensor:
    """Proposition 3.4: ``γ = max(γ_1 / 8, -γ_d)`` from the largest and smallest real eigenvalues of ``A``."""
    values, _ = real_eigenpairs(A)
    return torch.maximum(values[0] / 8, -values[-1])


def proposition_3_4(A: Tensor, R: float | Tensor, n: int | Tensor) -> Tensor:
    """Proposition 3.4 (``V = I``): ``Lip(f|B_R^n) >= √(n-1) / (1 + (n-1) exp(-2 γ R²))``."""
    g, R, n = gamma(A), as_radius(R), as_count(n)
    check_broadcast(R=R, n=n)
    return torch.sqrt(n - 1) / (1 + (n - 1) * torch.exp(-2 * g * R**2))


def lemma_c_7(eigenvalue: float | Tensor, R: float | Tensor, n: int | Tensor) -> Tensor:
    """Lemma C.7 (``V = I``): ``Lip_X(f) >= √(n-1) p`` at its configuration for eigenvalue ``λ``.

    ``p = 1/(1 + (n-1) e^{-λR²/4})`` if ``λ > 0``, ``p = 1/(1 + (n-1) e^{-2|λ|R²})`` if ``λ < 0``.
    """
    lam, R, n = as_real(eigenvalue, "eigenvalue"), as_radius(R), as_count(n)
    check_broadcast(eigenvalue=lam, R=R, n=n)
    rate = torch.where(lam > 0, lam / 4, 2 * lam.abs())
    return torch.sqrt(n - 1) / (1 + (n - 1) * torch.exp(-rate * R**2))


def _proposition_3_6(A: Tensor, R: float | Tensor) -> Tensor:
    """Proposition 3.6 / C.8 (``V = I``), leading order: the two-Dirac constant grows like ``(γ/2) R² e^{γR²}``."""
    g, R = gamma(A), as_radius(R)
    return g / 2 * R**2 * torch.exp(g * R**2)


def argmax_counts(X: Tensor, A: Tensor, *, masked: bool = False) -> Tensor:
    """Theorem 3.7: ``#{i : m_i = j}`` for ``m_i = argmax_j <A x_i, x_j>`` (``j <= i`` if masked), ``(B, n)``."""
    check_tokens(X)
    check_matrix(A, "A", 2)
    check_width(X, A.shape[-1], f"A of shape {tuple(A.shape)}")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square (d, d) matrix; got shape {tuple(A.shape)}")
    m = scores(X, A, masked=check_bool(masked, "masked")).argmax(-1)
    return torch.zeros_like(m).scatter_add_(1, m, torch.ones_like(m))


def theorem_3_7_limit(X: Tensor, A: Tensor, V: Tensor, *, masked: bool = False) -> Tensor:
    """Theorem 3.7 (4.5 masked): ``lim_R Lip_{RX}(f) = ||V||₂ √(max_j #{i : m_i = j})``, ``(B,)``."""
    _check_head(A, V)
    return _norm2(V) * argmax_counts(X, A, masked=masked).amax(1).double().sqrt()


def two_dirac_constant(gamma: float | torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Proposition 3.6 (our derivation): the two-Dirac constant is ``(1 + γR²) e^{γR²} / 2``, up to ``O(e^{-2γR²})``."""
    g, R = as_radius(gamma, "gamma"), as_radius(R)
    return (1 + g * R**2) * torch.exp(g * R**2) / 2


def theorem_3_5_sharpened(A: torch.Tensor, V: torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Theorem 3.5 with half its exponent (our proof): ``||V|| ((1 + 2||A||R²) e^{||A||R²} + ||A||R²)``, all ``n``."""
    _check_head(A, V)
    a, v, R2 = _norm2(A), _norm2(V), as_radius(R) ** 2
    return v * ((1 + 2 * a * R2) * torch.exp(a * R2) + a * R2)


def lemma_c_7_sharpened(eigenvalue: float | torch.Tensor, R: float | torch.Tensor,
                        n: int | torch.Tensor) -> torch.Tensor:
    """Lemma C.7 with the spread term kept (our proof): ``Lip_X(f) >= √(n-1) p (1 + 2γR² (1 - p))``, ``V = I``.

    ``p`` is the lemma's weight and ``2γR² = λR²/4`` (``λ > 0``) or ``2|λ|R²`` (``λ < 0``).
    """
    lam, R, n = as_real(eigenvalue, "eigenvalue"), as_radius(R), as_count(n)
    check_broadcast(eigenvalue=lam, R=R, n=n)
    kappa = torch.where(lam > 0, lam / 4, 2 * lam.abs()) * R**2
    p = 1 / (1 + (n - 1) * torch.exp(-kappa))
    return torch.sqrt(n - 1) * p * (1 + kappa * (1 - p))


def masked_mean_field_bound(A: torch.Tensor, V: torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Theorem 4.4 as re-derived in chapter 7: ``||V|| (a R² + 2 (1 + 2 a R²) e^{2 a R²})``, ``a = ||A||₂``.

    The factor 2 on the key term is Hardy's inequality for the causal averages; without it (the
    bound of Theorem 3.5) the statement fails for small ``a R²``.
    """
    _check_head(A, V)
    a, v = _norm2(A), _norm2(V)
    aR2 = a * as_radius(R) ** 2
    return v * (aR2 + 2 * (1 + 2 * aR2) * torch.exp(2 * aR2))


def flow_radius_bound(r0: float | torch.Tensor, V: torch.Tensor, T: float, L: int) -> torch.Tensor:
    """Chapter 9's ball: every token of layer ``k`` of :func:`attention_flow` has norm ``<= (1 + h ||V||)^k r0``.

    ``h = T/L`` and ``r0`` is the largest initial token norm; shape ``(L + 1,)``. As ``L -> ∞`` this
    tends to ``e^{||V|| t} r0``, the bound for the flow.
    """
    L = check_positive_int(L, "L")
    v, T = _norm2(V), as_radius(T, "T")
    k = torch.arange(L + 1, dtype=torch.float64)
    return as_radius(r0, "r0") * (1 + T / L * v) ** k


def flow_gronwall_log(A: torch.Tensor, V: torch.Tensor, r0: float, n: int, T: float, L: int,
                      step_constants: torch.Tensor | None = None) -> torch.Tensor:
    """Discrete Grönwall: ``log Π_{j<k} (1 + h Lip_j)``, ``k = 0..L``, bounds ``log(||X_k - Y_k|| / ||X_0 - Y_0||)``.

    ``Lip_j`` defaults to the smaller of Theorem 3.3 and Equation (1) (Theorem 3.5) on the ball of
    :func:`flow_radius_bound`; pass measured per-layer constants as ``step_constants`` (shape ``(L,)``).
    """
    h = as_radius(T, "T") / check_positive_int(L, "L")
    if step_constants is not None:
        if tuple(check_float(step_constants, "step_constants").shape) != (L,):
            raise ValueError(f"step_constants must hold one constant per layer, shape ({L},); got "
                             f"{tuple(step_constants.shape)}")
        if bool((step_constants < 0).any()):
            raise ValueError("step_constants must be Lipschitz constants >= 0")
    else:
        R = flow_radius_bound(r0, V, T, L)[:-1]
        step_constants = torch.minimum(theorem_3_3(A, V, R, n), theorem_3_5(A, V, R))
    logs = torch.log1p(h * step_constants.double())
    return torch.cat([logs.new_zeros(1), logs.cumsum(0)])


# ------------------------------------------------ sharpened Theorem 3.3 / E.3 and log forms (chapters 3, 6, 8)


def theorem_e_3_sharpened(A: Tensor, V: Tensor, R: float | Tensor, n: int | Tensor,
                          score_bias: Tensor | None = None) -> Tensor:
    """Theorem E.3 (and 3.3 for ``c = 0``) via the variance identity (our proof): ``4n`` becomes ``n``.

    ``√3 ||V|| (||A||² R⁴ + n R² (||A|| R + |c|)² + n)^{1/2}``; with ``c = 0``, Theorem 3.3 with ``n + 1``
    in place of ``4n + 1``.
    """
    _check_head(A, V)
    a, v = _norm2(A), _norm2(V)
    R, n = as_radius(R), as_count(n)
    check_broadcast(R=R, n=n)
    c = _score_bias_norm(score_bias, A.shape[0])
    return math.sqrt(3) * v * torch.sqrt(a**2 * R**4 + n * R**2 * (a * R + c) ** 2 + n)


def log_theorem_3_5(A: Tensor, V: Tensor, R: float | Tensor) -> Tensor:
    """Theorem 3.5 / Equation (1) in logarithms: ``log ||V|| + log(1 + 3 a R²) + 2 a R²``, finite for any ``R``."""
    _check_head(A, V)
    a, v, R2 = _norm2(A), _norm2(V), as_radius(R) ** 2
    return torch.log(v) + torch.log1p(3 * a * R2) + 2 * a * R2


def log_theorem_3_5_sharpened(A: Tensor, V: Tensor, R: float | Tensor) -> Tensor:
    """:func:`theorem_3_5_sharpened` in logarithms: ``log ||V|| + log(1 + 2aR² + aR² e^{-aR²}) + aR²``."""
    _check_head(A, V)
    a, v, R2 = _norm2(A), _norm2(V), as_radius(R) ** 2
    return torch.log(v) + torch.log1p(2 * a * R2 + a * R2 * torch.exp(-a * R2)) + a * R2
