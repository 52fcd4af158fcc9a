"""L2 self-attention (Kim, Papamakarios & Mnih, 2021, Sec. 3): scores ``-|q_i - k_j|² / sqrt(D/H)``.

A head ``h`` maps the tokens ``x_i`` (rows of ``X``) to ``P^h X A^h W^{V,h}`` (the paper's row
convention), with ``P^h_ij ∝ exp(-|W^{Q,h}ᵀ x_i - W^{K,h}ᵀ x_j|² / τ)``,
``τ = sqrt(D/H)`` (the head width) and ``A^h = W^{Q,h} W^{K,h}ᵀ / τ``; heads are concatenated and
multiplied by ``W^O``. Tied weights ``W^K = W^Q`` make the map Lipschitz (Theorem 3.2); untied ones do
not. :class:`L2AttentionMap` brings closed-form Jacobian products, which
:func:`lipnb.local_lipschitz` uses instead of automatic differentiation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ..arguments import check_tokens
from .linearization import ClosedForm, Linearization

__all__ = [
    "L2AttentionMap",
    "L2Heads",
    "l2_attention",
    "random_l2_heads",
    "untied_blowup_input",
]


@dataclass(frozen=True)
class L2Heads:
    """Kim et al. Sec. 3: ``Q = W^{Q,h}`` ``(H, D, k)``, ``V = W^{V,h}`` ``(H, D, m)``, ``W = W^O`` ``(H m, D')``.

    ``K = None`` ties the key weights to the query weights (``W^K = W^Q``, the Lipschitz case);
    ``W = None`` concatenates the heads. ``tau = sqrt(k)`` is the paper's ``sqrt(D/H)``.
    """

    Q: Tensor
    V: Tensor
    W: Tensor | None = None
    K: Tensor | None = None

    def __post_init__(self) -> None:
        if self.Q.dim() != 3 or self.V.dim() != 3:
            raise ValueError(f"Q and V must be (H, D, k) and (H, D, m); got Q {tuple(self.Q.shape)},"
                             f" V {tuple(self.V.shape)}")
        if self.V.shape[:2] != self.Q.shape[:2]:
            raise ValueError(f"V must have the heads and D of Q {tuple(self.Q.shape[:2])}; got {tuple(self.V.shape)}")
        if self.K is not None and self.K.shape != self.Q.shape:
            raise ValueError(f"K must have the shape of Q {tuple(self.Q.shape)}; got {tuple(self.K.shape)}")
        H, m = self.V.shape[0], self.V.shape[2]
        if self.W is not None and (self.W.dim() != 2 or self.W.shape[0] != H * m):
            raise ValueError(f"W must be (H m, D') = ({H * m}, D'); got {tuple(self.W.shape)}")

    @property
    def tied(self) -> bool:
        """Whether ``W^K = W^Q`` (Kim et al.'s Lipschitz L2 attention)."""
        return self.K is None

    @property
    def keys(self) -> Tensor:
        """``W^{K,h}``: ``Q`` itself when tied."""
        return self.Q if self.K is None else self.K

    @property
    def tau(self) -> float:
        """``τ = sqrt(D/H)``, the square root of the head width ``k``."""
        return math.sqrt(self.Q.shape[-1])

    @property
    def values(self) -> Tensor:
        """The value factors ``A^h W^{V,h} = W^{Q,h} W^{K,h}ᵀ W^{V,h} / τ``, ``(H, D, m)``."""
        return self.Q @ (self.keys.mT @ self.V) / self.tau

    def to(self, like: Tensor) -> L2Heads:
        """The same heads in ``like``'s dtype and device."""
        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(like)
        return L2Heads(cast(self.Q), cast(self.V), cast(self.W), cast(self.K))


def random_l2_heads(D: int, H: int = 1, *, tied: bool = True, out: bool = True, scale: float = 1.0,
                    seed: int = 0, dtype: torch.dtype = torch.float64) -> L2Heads:
    """Gaussian heads of width ``D/H`` with entries of variance ``scale² / D`` (a fixed ``seed``)."""
    if D % H:
        raise ValueError(f"H = {H} must divide D = {D}")
    g = torch.Generator().manual_seed(seed)
    k = D // H

    def draw(*shape: int) -> Tensor:
        return scale * torch.randn(*shape, generator=g, dtype=dtype) / math.sqrt(D)
    Q, V = draw(H, D, k), draw(H, D, k)
    K = None if tied else draw(H, D, k)
    return L2Heads(Q, V, draw(H * k, D) if out else None, K)


def _l2_scores(X: Tensor, heads: L2Heads) -> Tensor:
    """Kim et al. Sec. 3: ``S^h_ij = -|W^{Q,h}ᵀ x_i - W^{K,h}ᵀ x_j|² / τ``, shape ``(B, H, n, n)``."""
    q = X.unsqueeze(1) @ heads.Q
    k = X.unsqueeze(1) @ heads.keys
    return (2 * q @ k.mT - q.square().sum(-1, keepdim=True) - k.square().sum(-1).unsqueeze(-2)) / heads.tau


def _combine(heads_out: Tensor, W: Tensor | None) -> Tensor:
    """Concatenate per-head outputs ``(B, H, n, m)`` and multiply by ``W^O``: ``(B, n, D')``."""
    B, H, n, m = heads_out.shape
    cat = heads_out.transpose(1, 2).reshape(B, n, H * m)
    return cat if W is None else cat @ W


def l2_attention(X: Tensor, heads: L2Heads, *, check: bool = True) -> Tensor:
    """Kim et al. Sec. 3: multi-head L2 self-attention ``[P^h X A^h W^{V,h}]_h W^O`` of ``(B, n, D)`` tokens.

    ``check=False`` skips the finiteness check of the tokens (needed under ``torch.func.vmap``).
    """
    if check:
        check_tokens(X)
    heads = heads.to(X)
    P = torch.softmax(_l2_scores(X, heads), dim=-1)
    return _combine(P @ (X.unsqueeze(1) @ heads.values), heads.W)


@dataclass
class _L2Linearization(ClosedForm):
    """``D_X F`` of L2 attention at a batch ``X`` in closed form: ``jvp``, ``vjp``, ``select``.

    With ``q = XW^Q``, ``k = XW^K``, ``v = X A W^V``, ``T = P ⊙ dS`` and
    ``dS_ij = (2/τ)(<dq_i, k_j> + <q_i, dk_j> - <k_j, dk_j>)`` (the row constant ``<q_i, dq_i>`` drops
    out of the softmax): ``dO = T v - rowsum(T) O + P dv``.
    """

    batched: ClassVar[tuple[str, ...]] = ("P", "q", "k", "v", "Oh")
    casts: ClassVar[bool] = False          # a bfloat16 presolve is not offered for L2 attention

    heads: L2Heads
    P: Tensor
    q: Tensor
    k: Tensor
    v: Tensor
    Oh: Tensor
    output: Tensor

    def _project(self, E: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        E = E.unsqueeze(1)
        return E @ self.heads.Q, E @ self.heads.keys, E @ self.heads.values

    def jvp(self, E: Tensor) -> Tensor:
        """``D_X F (E)`` for a batch of directions ``(B, n, D)``."""
        dq, dk, dv = self._project(E.to(self.P.dtype))
        c = 2 / self.heads.tau
        dS = c * (dq @ self.k.mT + self.q @ dk.mT - (self.k * dk).sum(-1).unsqueeze(-2))
        T = self.P * dS
        dO = T @ self.v - T.sum(-1, keepdim=True) * self.Oh + self.P @ dv
        return _combine(dO, self.heads.W)

    def vjp(self, G: Tensor) -> Tensor:
        """``D_X Fᵀ (G)`` for a batch of cotangents ``(B, n, D')``: the adjoint of :meth:`jvp`."""
        G = G.to(self.P.dtype)
        B, n = G.shape[:2]
        H, m = self.v.shape[1], self.v.shape[-1]
        Gc = G if self.heads.W is None else G @ self.heads.W.mT
        dO = Gc.view(B, n, H, m).transpose(1, 2)
        S = self.P * (dO @ self.v.mT - (dO * self.Oh).sum(-1, keepdim=True))
        c = 2 / self.heads.tau
        gq = c * (S @ self.k)
        gk = c * (S.mT @ self.q - S.sum(-2).unsqueeze(-1) * self.k)
        gv = self.P.mT @ dO
        X_bar = gq @ self.heads.Q.mT + gk @ self.heads.keys.mT + gv @ self.heads.values.mT
        return X_bar.sum(1)



@dataclass(frozen=True, eq=False)
class L2AttentionMap:
    """L2 self-attention as a map ``(B, n, D) -> (B, n, D')`` that knows its Jacobian (closed form)."""

    heads: L2Heads

    def __call__(self, X: Tensor) -> Tensor:
        return l2_attention(X, self.heads)

    def linearize(self, X: Tensor) -> Linearization:
        """Closed-form ``jvp`` and ``vjp`` of :func:`l2_attention` at the batch ``X`` (no autograd)."""
        check_tokens(X)
        if X.shape[-1] != self.heads.Q.shape[1]:
            raise ValueError(f"tokens have D = {X.shape[-1]} but the heads expect D = {self.heads.Q.shape[1]}")
        with torch.no_grad():
            heads = self.heads.to(X)
            Xh = X.detach().unsqueeze(1)
            P = torch.softmax(_l2_scores(X.detach(), heads), dim=-1)
            v = Xh @ heads.values
            Oh = P @ v
            lin = _L2Linearization(heads, P, Xh @ heads.Q, Xh @ heads.keys, v, Oh, _combine(Oh, heads.W))
        return lin


def untied_blowup_input(t: Tensor | float, D: int, *, dtype: torch.dtype = torch.float64) -> Tensor:
    """Two tokens ``x_1 = t e_1``, ``x_2 = 0``: with ``W^Q = I``, ``W^K = 2I`` row 1's scores tie for every ``t``.

    ``|x_1 - 2x_1|² = |x_1 - 0|²``, so ``P_11 = P_12 = 1/2`` while the score gap moves at speed ``∝ t``:
    the local constant of the untied map grows like ``t²``. Shape ``(len(t), 2, D)``.
    """
    t = torch.as_tensor(t, dtype=dtype).reshape(-1)
    X = torch.zeros(len(t), 2, D, dtype=dtype)
    X[:, 0, 0] = t
    return X
