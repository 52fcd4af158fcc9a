"""Attention sub-layers as maps with closed-form Jacobians: residual connection and LayerNorm around Def 2.2.

BERT runs its attention post-LN, ``LayerNorm(X + f(X))``; GPT-2 pre-LN, ``X + f(LayerNorm(X))`` (Sec. 2.3).
The Jacobian of either is a product of three closed forms: Lemma C.2's for the multi-head map ``f``
(:class:`lipnb.core.jacobian.MultiHeadMap`), the identity for the residual, and LayerNorm's
(:class:`lipnb.core.normalization.LayerNormLinearization`). Products cost those of ``f`` plus a few passes over
the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..arguments import check_tokens
from .jacobian import AttentionLinearization, MultiHeadMap
from .linearization import ClosedForm
from .normalization import LayerNormLinearization, layer_norm

__all__ = ["ResidualAttentionMap", "SublayerLinearization"]


class SublayerLinearization(ClosedForm):
    """The Jacobian of a residual attention sub-layer at ``X``, composed from closed forms.

    Post-LN (``post``): ``J = N (I + F)`` with ``N`` LayerNorm's Jacobian at ``X + f(X)`` and ``F``
    Lemma C.2's at ``X``; pre-LN: ``J = I + F N`` with ``N`` at ``X`` and ``F`` at ``LayerNorm(X)``.
    """

    parts = ("attention", "norm")

    def __init__(self, attention: AttentionLinearization, norm: LayerNormLinearization, post: bool,
                 output: Tensor) -> None:
        self.attention, self.norm, self.post, self.output = attention, norm, post, output

    def jvp(self, E: Tensor) -> Tensor:
        """``J E``."""
        if self.post:
            return self.norm.jvp(self.attention.jvp(E).add_(E))
        return self.attention.jvp(self.norm.jvp(E)).add_(E)

    def vjp(self, G: Tensor) -> Tensor:
        """``Jᵀ G``."""
        if self.post:
            g = self.norm.vjp(G)
            return self.attention.vjp(g).add_(g)
        return self.norm.vjp(self.attention.vjp(G)).add_(G)




@dataclass(frozen=True, eq=False)
class ResidualAttentionMap:
    """A residual attention sub-layer (Sec. 2.3): ``LayerNorm(X + f(X))`` if ``post`` (BERT), else
    ``X + f(LayerNorm(X))`` (GPT-2), with ``f`` a :class:`~lipnb.core.jacobian.MultiHeadMap` and LayerNorm
    ``γ ⊙ z + β`` (``eps`` inside the square root). ``linearize`` composes the closed forms
    (:class:`SublayerLinearization`), which :func:`lipnb.local_lipschitz` uses instead of autograd.
    """

    attention: MultiHeadMap
    gamma: Tensor
    beta: Tensor
    eps: float
    post: bool

    def __post_init__(self) -> None:
        d = self.attention.heads.A.shape[-1]
        for name in ("gamma", "beta"):
            value = getattr(self, name)
            if not isinstance(value, Tensor) or tuple(value.shape) != (d,):
                raise ValueError(f"{name} must be a tensor of shape ({d},); got {getattr(value, 'shape', value)}")
        if not self.eps >= 0:
            raise ValueError(f"eps must be >= 0; got {self.eps}")

    def _affine(self, X: Tensor) -> tuple[Tensor, Tensor]:
        return self.gamma.to(X), self.beta.to(X)

    def __call__(self, X: Tensor) -> Tensor:
        gamma, beta = self._affine(X)
        if self.post:
            return layer_norm(X + self.attention(X), gamma, beta, self.eps)
        return X + self.attention(layer_norm(X, gamma, beta, self.eps))

    def flops(self, n: int) -> dict[str, int]:
        """Matrix-product FLOPs per input of length ``n`` (those of ``f``: LayerNorm and residual have none)."""
        return self.attention.flops(n)

    def linearize(self, X: Tensor) -> SublayerLinearization:
        """The closed-form Jacobian products at the batch ``X`` (no autograd)."""
        check_tokens(X)
        gamma, beta = self._affine(X)
        with torch.no_grad():
            X = X.detach()
            if self.post:
                attention = self.attention.linearize(X)
                norm = LayerNormLinearization.at(X + attention.output, gamma, beta, self.eps)
                return SublayerLinearization(attention, norm, True, norm.output)
            norm = LayerNormLinearization.at(X, gamma, beta, self.eps)
            attention = self.attention.linearize(norm.output)
            return SublayerLinearization(attention, norm, False, X + attention.output)
