"""Inputs: configurations attaining the lower bounds (Lemma C.7, Prop. 3.4, 3.6, App. C.7), random, optimised."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ..arguments import as_radius, check_float, check_positive_int
from .dense import jacobian_matrix

__all__ = [
    "Case",
    "HeadSpectrum",
    "adversarial_case",
    "argmax_configuration",
    "ball_tokens",
    "gradient_ascent",
    "head_spectra",
    "lemma_c_7_input",
    "maximize_local_lipschitz",
    "proposition_3_6_measure",
    "quadratic_growth_input",
    "random_head",
    "real_eigenpairs",
    "repeat_tokens",
]


Case = Literal["positive", "negative", "auto"]


def real_eigenpairs(A: Tensor, *, rtol: float = 1e-9) -> tuple[Tensor, Tensor]:
    """The real eigenvalues of ``A``, largest first, and unit real eigenvectors as columns.

    Raises ``ValueError`` when ``A`` is not square or has no real eigenvalue.
    """
    check_float(A, "A")
    if A.dim() != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix; got shape {tuple(A.shape)}")
    values, vectors = torch.linalg.eig(A.double())
    scale = values.abs().max().clamp_min(1e-300)
    real = values.imag.abs() <= rtol * scale
    if not bool(real.any()):
        raise ValueError("A has no real eigenvalue, so Lemma C.7 / Proposition 3.4 do not apply")
    values, vectors = values[real].real, vectors[:, real]
    # A real eigenvalue has a real eigenvector: rotate away the arbitrary complex phase.
    pivot = vectors.abs().argmax(0)
    phase = vectors[pivot, torch.arange(vectors.shape[1])]
    vectors = (vectors * (phase.abs() / phase)).real
    vectors = vectors / vectors.norm(dim=0)
    residual = (A.double() @ vectors - vectors * values).norm(dim=0)
    if bool((residual > 1e-6 * scale.real.clamp_min(1.0)).any()):
        raise ValueError("the eigen-decomposition of A is inaccurate (residual "
                         f"{residual.max().item():.1e}); rescale A before building adversarial inputs")
    order = values.argsort(descending=True)
    return values[order].to(A.dtype), vectors[:, order].to(A.dtype)


def adversarial_case(A: Tensor) -> Literal["positive", "negative"]:
    """Sec. 5.2 / Prop. 3.4: the positive case when ``γ_1 > -8 γ_d``, else the negative one."""
    values, _ = real_eigenpairs(A)
    return "positive" if bool(values[0] > -8 * values[-1]) else "negative"


def _radii(R: float | Tensor, A: Tensor) -> Tensor:
    return as_radius(R).to(dtype=A.dtype, device=A.device).reshape(-1)


def _eigen_direction(A: Tensor, case: Case) -> tuple[Tensor, Literal["positive", "negative"]]:
    values, vectors = real_eigenpairs(A)
    chosen = adversarial_case(A) if case == "auto" else case
    if chosen == "positive":
        if not bool(values[0] > 0):
            raise ValueError("the positive case of Lemma C.7 needs a positive real eigenvalue")
        return vectors[:, 0], chosen
    if chosen == "negative":
        if not bool(values[-1] < 0):
            raise ValueError("the negative case of Lemma C.7 needs a negative real eigenvalue")
        return vectors[:, -1], chosen
    raise ValueError(f"case must be 'positive', 'negative' or 'auto'; got {case!r}")


def lemma_c_7_input(A: Tensor, R: float | Tensor, n: int, *, case: Case = "auto") -> Tensor:
    """Lemma C.7: ``(Ru, Ru/2, ..., Ru/2)`` for ``λ > 0``, ``(-Ru, Ru, ..., Ru)`` for ``λ < 0``.

    ``u`` is a unit eigenvector of the largest (positive case) or smallest (negative case) real
    eigenvalue; ``case="auto"`` applies the rule of Sec. 5.2. Every token lies in ``B_R``.
    """
    n = check_positive_int(n, "n", minimum=2)
    u, chosen = _eigen_direction(A, case)
    coef = torch.full((n,), 0.5 if chosen == "positive" else 1.0, dtype=A.dtype, device=A.device)
    coef[0] = 1.0 if chosen == "positive" else -1.0
    return _radii(R, A).view(-1, 1, 1) * coef.view(1, n, 1) * u.view(1, 1, -1)


def proposition_3_6_measure(A: Tensor, R: float | Tensor, *, case: Case = "auto"
                            ) -> tuple[Tensor, Tensor]:
    """Proposition 3.6: two Diracs, mass ``p = e^{-2γR²}`` on the outlier of Lemma C.7's configuration.

    Returns the two tokens ``(len(R), 2, d)`` and their weights ``(len(R), 2)``, for Def C.4.
    """
    _, chosen = _eigen_direction(A, case)
    values, _ = real_eigenpairs(A)
    g = values[0] / 8 if chosen == "positive" else -values[-1]
    X = lemma_c_7_input(A, R, 2, case=chosen)
    r = _radii(R, A)
    p = torch.exp(-2 * g * r**2)
    return X, torch.stack([p, 1 - p], dim=1)


def argmax_configuration(A: Tensor, R: float | Tensor, n: int, *, jitter: float = 0.05,
                         seed: int = 0) -> Tensor:
    """Theorem 3.7: a generic input where the first token is every token's argmax, radius about ``R``.

    Lemma C.7's positive configuration, perturbed by a small seeded random jitter so that it lies
    off the null set of ties; the limit norm is then ``||V|| √n``.
    """
    jitter = float(as_radius(jitter, "jitter"))
    base = lemma_c_7_input(A, 1.0, n, case="positive")[0]
    g = torch.Generator(device="cpu").manual_seed(seed)
    noise = torch.randn(base.shape, generator=g, dtype=torch.float64).to(base)
    X = base + jitter * noise / base.shape[1] ** 0.5
    return _radii(R, A).view(-1, 1, 1) * X / X.norm(dim=-1).amax()


def quadratic_growth_input(R: float | Tensor, n: int, d: int, *, seed: int = 0,
                           dtype: torch.dtype = torch.float64) -> Tensor:
    """App. C.7 (after Kim et al., 2021): ``x_1 = 0`` and ``n-1`` tokens at radius ``R``.

    The first token scores every token equally, so its output moves with the tokens' covariance,
    which grows like ``R²``: on this null set ``Lip_X(f)`` grows like ``R²``, not ``√n``.
    """
    n, d = check_positive_int(n, "n", minimum=2), check_positive_int(d, "d")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")
    g = torch.Generator(device="cpu").manual_seed(seed)
    Z = torch.randn(n - 1, d, generator=g, dtype=torch.float64).to(dtype)
    Z = Z / Z.norm(dim=1, keepdim=True)
    X = torch.cat([torch.zeros(1, d, dtype=dtype), Z]).unsqueeze(0)
    return as_radius(R).to(dtype).reshape(-1, 1, 1) * X


def ball_tokens(batch: int, n: int, d: int, R: float, *, seed: int = 0) -> torch.Tensor:
    """Theorem 3.3's domain ``B_R^n``: ``(batch, n, d)`` tokens drawn uniformly in the ball of radius ``R``, float64."""
    batch, n, d = (check_positive_int(k, name) for k, name in ((batch, "batch"), (n, "n"), (d, "d")))
    R = float(as_radius(R))
    g = torch.Generator().manual_seed(seed)
    directions = torch.nn.functional.normalize(torch.randn(batch, n, d, generator=g, dtype=torch.float64), dim=-1)
    radii = R * torch.rand(batch, n, 1, generator=g, dtype=torch.float64) ** (1.0 / d)
    return radii * directions


def random_head(d: int, seed: int) -> torch.Tensor:
    """A test head for Theorem 3.3 / Prop. 3.4: ``A`` with i.i.d. ``N(0, 1/d)`` entries, float64, ``(d, d)``."""
    d = check_positive_int(d, "d")
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)


def repeat_tokens(Y: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Def C.4: the sequence ``(B, sum m, d)`` holding token ``y_k`` of ``Y`` ``(B, K, d)`` repeated ``m_k`` times."""
    counts = torch.as_tensor(counts, dtype=torch.long, device=Y.device)
    if counts.shape != Y.shape[1:2] or bool((counts < 1).any()):
        raise ValueError(f"counts must be K = {Y.shape[1]} positive integers; got {counts.tolist()}")
    return Y.repeat_interleave(counts, dim=1)


@dataclass(frozen=True)
class HeadSpectrum:
    """Prop. 3.4 for each head: largest and smallest real eigenvalue of ``A_h``, ``γ_h`` and the Sec. 5.2 case."""

    largest: torch.Tensor
    smallest: torch.Tensor
    gamma: torch.Tensor
    positive: torch.Tensor


def head_spectra(A: torch.Tensor, *, rtol: float = 1e-9) -> HeadSpectrum:
    """Prop. 3.4 / Sec. 5.2 for a stack ``(H, d, d)``: ``γ_h = max(γ_1/8, -γ_d)`` via a low-rank factorization.

    ``A = B C`` from the SVD truncated at rank ``r``; the non-zero eigenvalues of ``A`` are those of the
    ``r x r`` matrix ``C B``, and ``0`` is one more when ``r < d``. ``positive`` is ``γ_1 > -8 γ_d``.
    """
    check_float(A, "A")
    if A.dim() != 3 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be a stack of square matrices (H, d, d); got shape {tuple(A.shape)}")
    A = A.double()
    largest, smallest = [], []
    for M in A:
        U, S, Vh = torch.linalg.svd(M)
        r = int((S > S[0] * M.shape[0] * torch.finfo(torch.float64).eps).sum())
        values = torch.linalg.eigvals((Vh[:r] @ U[:, :r]) * S[:r])
        scale = values.abs().max().clamp_min(1e-300)
        real = values.real[values.imag.abs() <= rtol * scale]
        if r < M.shape[0]:
            real = torch.cat([real, real.new_zeros(1)])
        if real.numel() == 0:
            raise ValueError("a head has no real eigenvalue, so Lemma C.7 / Proposition 3.4 do not apply")
        largest.append(real.max())
        smallest.append(real.min())
    top, bottom = torch.stack(largest), torch.stack(smallest)
    return HeadSpectrum(top, bottom, torch.maximum(top / 8, -bottom), top > -8 * bottom)


def gradient_ascent(value: Callable[[Tensor], Tensor], X0: Tensor, *, steps: int = 100, lr: float = 0.05,
                    project: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """Adam ascent of a differentiable per-input ``value`` ``(B,)`` from each start of ``X0`` (float64).

    After each step ``project`` (if given) maps the iterate back into the domain. Returns the best
    inputs met and their values: lower bounds on the supremum of ``value`` over the domain.
    """
    steps = check_positive_int(steps, "steps", minimum=0)
    X = X0.detach().double().clone()
    if project is not None:
        X = project(X)
    X.requires_grad_(True)
    optimizer = torch.optim.Adam([X], lr=lr)
    best, best_X = torch.full((len(X),), -torch.inf, dtype=torch.float64), X.detach().clone()
    for _ in range(steps + 1):
        v = value(X)
        better = v.detach() > best
        best = torch.where(better, v.detach(), best)
        best_X[better] = X.detach()[better]
        optimizer.zero_grad()
        (-v.sum()).backward()
        optimizer.step()
        if project is not None:
            with torch.no_grad():
                X.copy_(project(X))
    return best_X, best


def maximize_local_lipschitz(fn: Callable[[torch.Tensor], torch.Tensor], X0: torch.Tensor, R: float, *,
                             steps: int = 100, lr: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Lemma 3.1 on ``B_R^n``: projected gradient ascent (Adam) of the exact float64 ``Lip_X(fn)`` from each start.

    For small ``n d`` only (dense Jacobians). Returns the best inputs ``(B, n, d)``, every token of norm
    ``<= R``, and their local constants ``(B,)``: lower bounds on ``Lip(fn|B_R^n)``.
    """
    R = float(as_radius(R))

    def value(Z: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_norm(jacobian_matrix(fn, Z, differentiable=True), ord=2)

    def into_ball(Z: torch.Tensor) -> torch.Tensor:
        return Z * (R / Z.norm(dim=-1, keepdim=True)).clamp(max=1)

    return gradient_ascent(value, X0, steps=steps, lr=lr, project=into_ball)
