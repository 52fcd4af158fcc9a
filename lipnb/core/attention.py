"""Self-attention as a map on sequences: Definitions 2.1, 2.2, 2.5 and C.4 of Castin et al. (2024).

Tensors are batched: a sequence of ``n`` tokens of dimension ``d`` is a row of a ``(B, n, d)`` tensor.
Every function follows the device and dtype of its input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..arguments import check_bool, check_matrix, check_tokens

__all__ = [
    "MultiHead",
    "attention_matrix",
    "causal_mask",
    "log_weights",
    "mask_future",
    "multihead_attention",
    "scores",
    "self_attention",
    "single_head",
]


def _check_values(V: Tensor, X: Tensor) -> None:
    check_matrix(V, "V", 2)
    if V.shape[1] != X.shape[-1]:
        raise ValueError(f"V is {tuple(V.shape)} but tokens have dimension d = {X.shape[-1]}")


def log_weights(weights: Tensor | None, X: Tensor) -> Tensor | None:
    """Def C.4: validate the simplex weights of a weighted sequence and return their logarithm, shape (B, 1, n)."""
    if weights is None:
        return None
    w = torch.as_tensor(weights, dtype=X.dtype, device=X.device)
    if w.dim() == 1:
        w = w.expand(X.shape[0], -1)
    if w.shape != X.shape[:2]:
        raise ValueError(f"weights must have shape (n,) or (batch, n) = {tuple(X.shape[:2])}; "
                         f"got {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("weights must be finite and strictly positive")
    return torch.log(w / w.sum(-1, keepdim=True)).unsqueeze(-2)


def attention_matrix(
    X: Tensor,
    A: Tensor,
    *,
    score_bias: Tensor | None = None,
    masked: bool = False,
    weights: Tensor | None = None,
) -> Tensor:
    """Def 2.1: ``P_ij = softmax_j <A x_i + c, x_j>`` (Def 2.5 when masked, Def C.4 with weights).

    ``A`` is ``(d, d)`` or stacked heads ``(H, d, d)``; the result is ``(B, n, n)`` or ``(B, H, n, n)``.
    The softmax subtracts each row's maximum, so scores of any size give no overflow.
    """
    check_tokens(X)
    masked = check_bool(masked, "masked")
    if not isinstance(A, Tensor):
        raise TypeError(f"A must be a torch.Tensor; got {type(A).__name__}")
    if A.dim() not in (2, 3) or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be a square (d, d) matrix or (H, d, d) stack; got {tuple(A.shape)}")
    check_matrix(A, "A", A.dim())
    d = X.shape[-1]
    if A.shape[-1] != d:
        raise ValueError(f"A is {tuple(A.shape[-2:])} but tokens have dimension d = {d}")
    if score_bias is not None:
        expected = (d,) if A.dim() == 2 else (A.shape[0], d)
        check_matrix(score_bias, "score_bias", len(expected))
        if tuple(score_bias.shape) != expected:
            raise ValueError(f"score_bias must have shape {expected}; got {tuple(score_bias.shape)}")
    logits = scores(X, A, score_bias=score_bias)
    log_w = log_weights(weights, X)
    if log_w is not None:
        logits = logits + (log_w if A.dim() == 2 else log_w.unsqueeze(1))
    return torch.softmax(mask_future(logits) if masked else logits, dim=-1)


def scores(X: Tensor, A: Tensor, *, queries: Tensor | None = None, score_bias: Tensor | None = None,
           masked: bool = False) -> Tensor:
    """Def 2.1's scores ``<A z_i + c, x_j>`` (``z = x`` unless ``queries``), ``-inf`` for ``j > i`` when masked.

    The one place lipnb forms them; no argument checks (see :func:`attention_matrix`). ``A`` ``(d, d)`` gives
    ``(B, m, n)``, stacked heads ``(H, d, d)`` give ``(B, H, m, n)``.
    """
    Z = X if queries is None else queries
    if A.dim() == 3:
        X, Z = X.unsqueeze(1), Z.unsqueeze(1)
        score_bias = None if score_bias is None else score_bias.unsqueeze(-2)
    query = Z @ A.mT
    if score_bias is not None:
        query = query + score_bias
    logits = query @ X.mT
    return mask_future(logits) if masked else logits


def mask_future(scores: Tensor) -> Tensor:
    """Def 2.5: the scores ``(..., n, n)`` with every entry ``j > i`` (a later token) set to ``-inf``."""
    n = scores.shape[-1]
    return scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1), -math.inf)


def causal_mask(X: Tensor) -> Tensor:
    """Def 2.5 as an additive mask ``(1, 1, n, n)`` for tokens ``X`` ``(B, n, d)``: ``finfo.min`` of ``X``'s dtype
    above the diagonal, ``0`` elsewhere; what Hugging Face's eager attention adds to its scores."""
    n = X.shape[1]
    return torch.full((n, n), torch.finfo(X.dtype).min, dtype=X.dtype, device=X.device).triu(1)[None, None]


def self_attention(
    X: Tensor,
    A: Tensor,
    V: Tensor,
    *,
    masked: bool = False,
    weights: Tensor | None = None,
) -> Tensor:
    """Def 2.1: ``f(X)_i = sum_j P_ij V x_j`` (Def 2.5 when masked, weighted Def C.4 with weights).

    ``X`` is ``(B, n, d)``, ``A`` is ``(d, d)``, ``V`` is ``(d_v, d)``; returns ``(B, n, d_v)``.
    """
    _check_values(V, X)
    P = attention_matrix(X, A, masked=masked, weights=weights)
    return P @ (X @ V.mT)


@dataclass(frozen=True)
class MultiHead:
    """Def 2.2 with the biases of App. E.3: ``f(X)_i = sum_h W_h f_h(X)_i + b_O``.

    Head ``h`` has scores ``<A_h x_i + c_h, x_j>`` and values ``V_h x_j + b_h``. Shapes:
    ``A`` ``(H, d, d)``, ``V`` ``(H, k, d)``, ``W`` ``(H, d_out, k)``, ``score_bias`` ``(H, d)``,
    ``value_bias`` ``(H, k)``, ``output_bias`` ``(d_out,)``.
    """

    A: Tensor
    V: Tensor
    W: Tensor
    score_bias: Tensor | None = None
    value_bias: Tensor | None = None
    output_bias: Tensor | None = None

    def __post_init__(self) -> None:
        check_matrix(self.A, "A", 3)
        check_matrix(self.V, "V", 3)
        check_matrix(self.W, "W", 3)
        H, d, d2 = self.A.shape
        if d != d2:
            raise ValueError(f"each A_h must be square; got A of shape {tuple(self.A.shape)}")
        if self.V.shape[0] != H or self.V.shape[2] != d:
            raise ValueError(f"V must be (H, k, d) = ({H}, k, {d}); got {tuple(self.V.shape)}")
        k = self.V.shape[1]
        if self.W.shape[0] != H or self.W.shape[2] != k:
            raise ValueError(f"W must be (H, d_out, k) = ({H}, d_out, {k}); got {tuple(self.W.shape)}")
        expected = {"score_bias": (H, d), "value_bias": (H, k), "output_bias": (self.W.shape[1],)}
        for name, shape in expected.items():
            b = getattr(self, name)
            if b is not None:
                check_matrix(b, name, len(shape))
                if tuple(b.shape) != shape:
                    raise ValueError(f"{name} must have shape {shape}; got {tuple(b.shape)}")

    @classmethod
    def from_projections(
        cls,
        Q: Tensor,
        K: Tensor,
        V: Tensor,
        W: Tensor,
        *,
        q_bias: Tensor | None = None,
        v_bias: Tensor | None = None,
        o_bias: Tensor | None = None,
    ) -> MultiHead:
        """Def 2.2 from per-head projections ``Q_h, K_h, V_h`` ``(H, k, d)``: ``A_h = K_h^T Q_h / sqrt(k)``.

        The key bias does not change the attention matrix (Remark E.1), so it is not an argument;
        the query bias enters as ``c_h = K_h^T b_Q / sqrt(k)``.
        """
        scale = 1.0 / math.sqrt(Q.shape[1])
        A = K.mT @ Q * scale
        c = None if q_bias is None else (K.mT @ q_bias.unsqueeze(-1)).squeeze(-1) * scale
        return cls(A=A, V=V, W=W, score_bias=c, value_bias=v_bias, output_bias=o_bias)

    @classmethod
    def single(cls, A: Tensor, V: Tensor) -> MultiHead:
        """One head with ``W = I``: the single-head map of Def 2.1 as a :class:`MultiHead`."""
        k = V.shape[0]
        return cls(A=A[None], V=V[None], W=torch.eye(k, dtype=V.dtype, device=V.device)[None])

    @property
    def num_heads(self) -> int:
        return self.A.shape[0]

    def to(self, *args, **kwargs) -> MultiHead:
        """Move or cast every parameter, like ``Tensor.to``."""
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(*args, **kwargs)

        return MultiHead(move(self.A), move(self.V), move(self.W), move(self.score_bias),
                         move(self.value_bias), move(self.output_bias))


def multihead_attention(
    X: Tensor,
    heads: MultiHead,
    *,
    masked: bool = False,
    weights: Tensor | None = None,
) -> Tensor:
    """Def 2.2: multi-head attention ``sum_h W_h f_h(X)_i + b_O``, heads computed in one batch.

    Masked (Def 2.5) and weighted (Def C.4) like :func:`self_attention`; returns ``(B, n, d_out)``.
    """
    P = attention_matrix(X, heads.A, score_bias=heads.score_bias, masked=masked, weights=weights)
    values = torch.einsum("bnd,hkd->bhnk", X, heads.V)
    if heads.value_bias is not None:
        values = values + heads.value_bias[:, None, :]
    out = torch.einsum("bhnk,hek->bne", P @ values, heads.W)
    if heads.output_bias is not None:
        out = out + heads.output_bias
    return out

def single_head(heads: MultiHead, h: int, *, project: bool = False) -> MultiHead:
    """Def 2.2: head ``h`` alone with its score and value biases: ``f_h`` (``W = I``) or ``W_h f_h`` if ``project``."""
    k = heads.V.shape[1]
    W = heads.W[h:h + 1] if project else torch.eye(k, dtype=heads.V.dtype, device=heads.V.device)[None]
    return MultiHead(heads.A[h:h + 1], heads.V[h:h + 1], W,
                     None if heads.score_bias is None else heads.score_bias[h:h + 1],
                     None if heads.value_bias is None else heads.value_bias[h:h + 1])
