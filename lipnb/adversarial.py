"""Inputs that attain the lower bounds of Castin et al. (2024): Lemma C.7, Prop. 3.4, 3.6, App. C.7.

Every constructor takes a radius ``R`` that may be a number or a 1-D tensor; the result is batched
over radii, shape ``(len(R), n, d)``, in the dtype and on the device of ``A``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "adversarial_case",
    "argmax_configuration",
    "lemma_c_7_input",
    "proposition_3_6_measure",
    "quadratic_growth_input",
    "real_eigenpairs",
]

Case = Literal["positive", "negative", "auto"]


def real_eigenpairs(A: Tensor, *, rtol: float = 1e-9) -> tuple[Tensor, Tensor]:
    """The real eigenvalues of ``A``, largest first, and unit real eigenvectors as columns.

    Raises ``ValueError`` when ``A`` is not square or has no real eigenvalue.
    """
    if A.dim() != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square matrix; got shape {tuple(A.shape)}")
    if not bool(torch.isfinite(A).all()):
        raise ValueError("A contains NaN or inf")
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
    r = torch.as_tensor(R, dtype=A.dtype, device=A.device).reshape(-1)
    if bool((r < 0).any()) or not bool(torch.isfinite(r).all()):
        raise ValueError("radii must be finite and non-negative")
    return r


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
    if n < 2:
        raise ValueError(f"Lemma C.7 needs n >= 2 tokens; got n = {n}")
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
    if n < 2:
        raise ValueError(f"the App. C.7 configuration needs n >= 2; got n = {n}")
    g = torch.Generator(device="cpu").manual_seed(seed)
    Z = torch.randn(n - 1, d, generator=g, dtype=torch.float64).to(dtype)
    Z = Z / Z.norm(dim=1, keepdim=True)
    X = torch.cat([torch.zeros(1, d, dtype=dtype), Z]).unsqueeze(0)
    return torch.as_tensor(R, dtype=dtype).reshape(-1, 1, 1) * X
