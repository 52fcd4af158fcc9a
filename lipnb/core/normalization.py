"""Token normalization (Sec. 2.3): LayerNorm, RMSNorm, the radius they fix, and absorbing their gains into a head."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .attention import MultiHead
from .linearization import ClosedForm

__all__ = [
    "LayerNormLinearization",
    "absorb_normalization",
    "layer_norm",
    "normalization_radius",
    "normalization_radius_bound",
    "normalize_tokens",
    "rms_norm",
]


def normalize_tokens(X: Tensor, *, center: bool = True, eps: float = 0.0) -> Tensor:
    """Sec. 2.3: LayerNorm's ``(x - mean x) / sqrt(var x + eps)`` (``center``) or RMSNorm's ``x / sqrt(mean x² + eps)``.

    No affine parameters: for ``eps = 0`` every token lands on the sphere of radius ``sqrt(d)``
    (and, centred, on the hyperplane ``sum_k z_k = 0``). Acts on the last dimension.
    """
    Z = X - X.mean(-1, keepdim=True) if center else X
    return Z / torch.sqrt(Z.square().mean(-1, keepdim=True) + eps)


def layer_norm(X: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """Sec. 2.3 (Ba et al., 2016): ``LayerNorm(x) = γ ⊙ (x - mean x) / sqrt(var x + eps) + β``."""
    return gamma * normalize_tokens(X, center=True, eps=eps) + beta


def rms_norm(X: Tensor, gamma: Tensor, eps: float = 1e-6) -> Tensor:
    """Sec. 2.3 (Zhang & Sennrich, 2019): ``RMSNorm(x) = γ ⊙ x / sqrt(mean x² + eps)``."""
    return gamma * normalize_tokens(X, center=False, eps=eps)


def normalization_radius_bound(gamma: Tensor, beta: Tensor | None = None) -> Tensor:
    """Sec. 2.3: a LayerNorm/RMSNorm output ``β + γ ⊙ z``, ``|z| <= sqrt(d)``, has norm ``<= sqrt(d) max|γ| + |β|``."""
    g = gamma.double()
    R = math.sqrt(g.numel()) * g.abs().max()
    return R if beta is None else R + beta.double().norm()


def normalization_radius(gamma: Tensor, beta: Tensor | None = None, *, center: bool = True) -> tuple[Tensor, Tensor]:
    """Sec. 2.3, exactly: ``R = max |β + γ ⊙ z|`` over ``|z| = sqrt(d)`` (and ``sum z = 0`` if ``center``): ``(R, z*)``.

    The outputs of LayerNorm (``center``) or RMSNorm (``eps = 0``) fill this ellipsoid, so ``R`` is the
    smallest radius of a centred ball containing all of them. The maximum of a convex quadratic on a
    sphere solves the secular equation ``|(λ - M)^{-1} b| = sqrt(d)``, ``λ >= λ_max(M)``, in float64.
    """
    g = gamma.double().flatten()
    d = g.numel()
    b0 = torch.zeros_like(g) if beta is None else beta.double().flatten()
    if center:  # orthonormal basis of the hyperplane sum z = 0
        P = torch.eye(d, dtype=torch.float64) - 1.0 / d
        U = torch.linalg.eigh(P).eigenvectors[:, 1:]
    else:
        U = torch.eye(d, dtype=torch.float64)
    GU = g.unsqueeze(1) * U
    mu, E = torch.linalg.eigh(GU.T @ GU)             # maximise wᵀ M w + 2 bᵀ w on |w|² = d
    bt = E.T @ (GU.T @ b0)
    rho2 = float(d)
    top = mu >= mu[-1] * (1 - 1e-12)
    scale = bt.norm().clamp_min(torch.finfo(torch.float64).tiny)
    gap = (mu[-1] - mu[~top])
    partial = bt[~top] / gap
    if bool(bt[top].norm() <= 1e-13 * scale) and float(partial.square().sum()) <= rho2:
        w = torch.zeros_like(bt)                     # hard case: λ = λ_max, complete along the top eigenvector
        w[~top] = partial
        w[torch.nonzero(top)[-1]] = math.sqrt(max(rho2 - float(partial.square().sum()), 0.0))
    else:
        lo, hi = 0.0, float(bt.norm()) / math.sqrt(rho2)    # t = λ - λ_max; |w(t)|² decreases from ∞ to <= d
        for _ in range(200):
            t = 0.5 * (lo + hi)
            if float((bt / (mu[-1] - mu + t)).square().sum()) > rho2:
                lo = t
            else:
                hi = t
        w = bt / (mu[-1] - mu + hi)
    z = U @ (E @ w)
    z = z * math.sqrt(rho2) / z.norm()
    return (b0 + g * z).norm(), z


def absorb_normalization(heads: MultiHead, gamma: Tensor, beta: Tensor | None = None) -> MultiHead:
    """Sec. 2.3: heads acting on ``y = γ ⊙ z + β`` equal heads acting on ``z`` with ``D = diag(γ)`` absorbed.

    ``A_h -> D A_h D``, ``V_h -> V_h D``, score bias ``c_h -> D (A_h β + c_h)``, value bias
    ``b_h -> V_h β + b_h``; ``W_h`` and the output bias are unchanged (RMSNorm: ``β = None``).
    """
    g = gamma.to(heads.A)
    A = g[:, None] * heads.A * g
    V = heads.V * g
    c, b = heads.score_bias, heads.value_bias
    if beta is not None:
        beta = beta.to(heads.A)
        Ab = heads.A @ beta
        c = Ab if c is None else Ab + c
        Vb = heads.V @ beta
        b = Vb if b is None else Vb + b
    c = None if c is None else g * c
    return MultiHead(A=A, V=V, W=heads.W, score_bias=c, value_bias=b, output_bias=heads.output_bias)


class LayerNormLinearization(ClosedForm):
    """Sec. 2.3: the Jacobian of ``LayerNorm(x) = γ ⊙ z + β``, ``z = (x - mean x) / s``, ``s = sqrt(var x + eps)``.

    Token by token, ``D LayerNorm(e) = γ ⊙ (e - mean e - z mean(z ⊙ e)) / s``: the projection in the
    middle is symmetric, so ``Dᵀ(g)`` is the same formula applied to ``γ ⊙ g``. Stores ``z`` ``(B, n, d)``
    and ``1 / s`` ``(B, n, 1)``.
    """

    batched, parameters = ("z", "inv_std"), ("gamma",)

    def __init__(self, z: Tensor, inv_std: Tensor, gamma: Tensor, output: Tensor) -> None:
        self.z, self.inv_std, self.gamma, self.output = z, inv_std, gamma, output

    @classmethod
    def at(cls, X: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> LayerNormLinearization:
        """The LayerNorm of every token of ``X`` ``(B, n, d)`` and what its Jacobian needs."""
        centred = X - X.mean(-1, keepdim=True)
        inv_std = torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps)
        z = centred * inv_std
        return cls(z, inv_std, gamma, torch.addcmul(beta, gamma, z))

    def _project(self, E: Tensor) -> Tensor:
        """``(e - mean e - z mean(z ⊙ e)) / s`` for every token."""
        out = E - E.mean(-1, keepdim=True)
        out.sub_(self.z * (self.z * E).mean(-1, keepdim=True))
        return out.mul_(self.inv_std)

    def jvp(self, E: Tensor) -> Tensor:
        """``D LayerNorm(E)``."""
        return self._project(E).mul_(self.gamma)

    def vjp(self, G: Tensor) -> Tensor:
        """``D LayerNormᵀ(G)``: the symmetric projection applied to ``γ ⊙ G``."""
        return self._project(G * self.gamma)


