"""Lemma C.2 in every form: the closed-form differential, matrix-free products, covariances, term matrices, limits."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ..arguments import check_float, check_positive_int, check_tokens
from .attention import MultiHead, attention_matrix, log_weights, mask_future, scores
from .linearization import ClosedForm

__all__ = [
    "AttentionLinearization",
    "MultiHeadMap",
    "attention_covariances",
    "concat_heads",
    "jacobian_block_norms",
    "lemma_c_2_jvp",
    "lemma_c_2_term_matrices",
    "score_gaps",
    "selection_jacobian",
]


def score_gaps(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): per row, largest minus second-largest score ``<A x_i, x_j>``, ``(B, n)``.

    A row with a single admissible token (row 1 when masked) has gap ``inf``; at ``RX`` the gaps scale by ``R²``.
    """
    logits = scores(X, A, masked=masked)
    if X.shape[1] < 2:
        return torch.full(X.shape[:2], math.inf, dtype=logits.dtype, device=X.device)
    top = logits.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def selection_jacobian(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): the matrix ``(B, n d_v, n d)`` of the limit ``ε ↦ (V ε_{m_1}, ..., V ε_{m_n})``.

    ``m_i = argmax_j <A x_i, x_j>`` (over ``j <= i`` when masked); off the null set of ties it is unique.
    """
    m = scores(X, A, masked=masked).argmax(-1)
    B, n, d = X.shape
    one_hot = torch.nn.functional.one_hot(m, n).to(V.dtype)
    return torch.einsum("bij,ek->biejk", one_hot, V).reshape(B, n * V.shape[0], n * d)


def lemma_c_2_term_matrices(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Lemma C.2 (``V = I``): the three terms of ``D_X f`` as dense matrices ``(B, 3, n d, n d)``, float64.

    Blocks ``(i, j)``: ``P_ij I``; ``δ_ij Cov_i A``; ``P_ij (x_j - x̄_i)(A x_i)ᵀ``. Their sum is the Jacobian.
    """
    X, A = X.double(), A.double()
    B, n, d = X.shape
    P = attention_matrix(X, A, masked=masked)
    centred = X.unsqueeze(1) - (P @ X).unsqueeze(2)                    # (B, i, j, d): x_j - x̄_i
    cov = _weighted_covariances(P, X)
    eye = torch.eye(d, dtype=torch.float64)
    mean = torch.einsum("bij,de->bidje", P, eye)
    own = torch.einsum("bide,ij->bidje", cov @ A, torch.eye(n, dtype=torch.float64))
    spread = torch.einsum("bij,bijd,bie->bidje", P, centred, X @ A.mT)
    return torch.stack([mean, own, spread], 1).reshape(B, 3, n * d, n * d)


def attention_covariances(Y: torch.Tensor, A: torch.Tensor, *, weights: torch.Tensor | None = None,
                          queries: torch.Tensor | None = None) -> torch.Tensor:
    """Lemma C.2 / C.6: covariance ``(B, m, d, d)`` of ``μ = Σ w_j δ_{y_j}`` under the kernel ``∝ w_j e^{<A z, y_j>}``.

    One covariance per query ``z`` (default: the tokens themselves, giving ``Cov_i`` of Lemma C.2).
    """
    logits = scores(Y, A, queries=queries)
    if weights is not None:
        logits = logits + log_weights(weights, Y)
    return _weighted_covariances(torch.softmax(logits, dim=-1), Y)


def _weighted_covariances(P: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Lemma C.2's ``Cov_k = Σ_j P_kj (y_j - ȳ_k)(y_j - ȳ_k)ᵀ`` with ``ȳ_k = Σ_j P_kj y_j``, ``(B, m, d, d)``.

    Every dense attention covariance of lipnb is this one; the closed-form Jacobian products and the
    data-dependent bound apply ``Cov_k`` to vectors without forming it.
    """
    centred = Y.unsqueeze(1) - (P @ Y).unsqueeze(2)
    return torch.einsum("bkj,bkjd,bkje->bkde", P, centred, centred)


def jacobian_block_norms(fn: Callable[[torch.Tensor], torch.Tensor], X: torch.Tensor, *, probes: int | None = None,
                         chunk: int = 256, seed: int = 0) -> torch.Tensor:
    """Lemma D.1's block structure: Frobenius norms ``||∂fn(X)_i / ∂x_j||_F`` of the Jacobian at ``X`` ``(1, n, d)``.

    Returns ``(n', n)`` from batched vector-Jacobian products, ``chunk`` at a time: exact with all ``n' d'``
    basis cotangents (``probes=None``), else the Hutchinson estimate from ``probes`` Gaussian cotangents per
    output token (``E ||J_ijᵀ g||² = ||J_ij||_F²``). A zero block gives exactly zero either way.
    """
    Y, pullback = torch.func.vjp(fn, X.detach())
    n_out, d_out = Y.shape[1:]
    if probes is None:
        k, cot = d_out, torch.eye(n_out * d_out, dtype=Y.dtype, device=Y.device)
    else:
        g = torch.Generator(device="cpu").manual_seed(seed)
        k = probes
        noise = torch.randn(n_out, probes, d_out, generator=g, dtype=torch.float64).to(Y)
        cot = torch.einsum("ij,ipe->ipje", torch.eye(n_out, dtype=Y.dtype, device=Y.device), noise)
    cot = cot.reshape(-1, 1, n_out, d_out)
    rows = torch.cat([torch.func.vmap(lambda v: pullback(v)[0])(cot[i:i + chunk])
                      for i in range(0, len(cot), chunk)])                      # (n' k, 1, n, d)
    sq = rows.view(n_out, k, X.shape[1], X.shape[2]).square().sum(-1)
    return (sq.sum(1) if probes is None else sq.mean(1)).sqrt()


def lemma_c_2_jvp(
    X: Tensor,
    A: Tensor,
    V: Tensor,
    E: Tensor,
    *,
    score_bias: Tensor | None = None,
    masked: bool = False,
    weights: Tensor | None = None,
) -> Tensor:
    """Lemma C.2 (D.1 masked, C.6 weighted, E.2 biased): the differential ``D_X f(E)`` in closed form.

    ``(D_X f(E))_i = V [ sum_j P_ij e_j + Cov_i A e_i + sum_j P_ij (x_j - xbar_i) <A x_i + c, e_j> ]``.
    """
    if not isinstance(E, torch.Tensor) or E.shape != X.shape:
        raise ValueError(f"E must have the shape of X {tuple(X.shape)}; got {tuple(getattr(E, 'shape', ()))}")
    check_tokens(E, "E")
    check_float(V, "V")
    if V.dim() != 2 or V.shape[1] != X.shape[-1]:
        raise ValueError(f"V must be (d_v, d) with d = {X.shape[-1]}; got shape {tuple(V.shape)}")
    P = attention_matrix(X, A, score_bias=score_bias, masked=masked, weights=weights)
    xbar = P @ X
    query = X @ A.mT if score_bias is None else X @ A.mT + score_bias
    mean_term = P @ E
    # Cov_i (A e_i) = sum_j P_ij x_j <x_j, A e_i> - xbar_i <xbar_i, A e_i>
    Ae = E @ A.mT
    t = Ae @ X.mT
    cov_term = (P * t) @ X - xbar * (P * t).sum(-1, keepdim=True)
    # sum_j P_ij (x_j - xbar_i) <A x_i + c, e_j>
    r = query @ E.mT
    spread_term = (P * r) @ X - xbar * (P * r).sum(-1, keepdim=True)
    return (mean_term + cov_term + spread_term) @ V.mT


def concat_heads(heads: MultiHead) -> MultiHead:
    """Def 2.2 without the output projection: ``W_h`` = block ``h`` of the identity, no output bias.

    The map sends ``X`` to the heads' outputs side by side, ``(f_1(X)_i, ..., f_H(X)_i)`` of
    dimension ``H k``: what BERT's ``BertSelfAttention`` returns (``attention_map(.., kind="self")``).
    """
    H, k = heads.V.shape[:2]
    eye = torch.eye(H * k, dtype=heads.V.dtype, device=heads.V.device)
    return MultiHead(heads.A, heads.V, eye.view(H * k, H, k).permute(1, 0, 2).contiguous(),
                     heads.score_bias, heads.value_bias, None)


@dataclass(frozen=True)
class _Factors:
    """Heads with ``A_h = K_hᵀ Q_h`` factored: scores ``<Q_h x_i + q_h, K_h x_j>``, values ``V_h x_j + b_h``.

    ``proj`` stacks, head by head, the rows ``[Q_h; K_h; V_h]`` (shape ``(H (2r + k), d)``), so one
    matrix product gives every projection of a token; ``W`` is ``None`` when the output is the
    concatenation of the heads (:func:`concat_heads`).
    """

    proj: Tensor
    q_bias: Tensor | None
    v_bias: Tensor | None
    W: Tensor | None
    out_bias: Tensor | None
    rank: int
    num_heads: int
    head_dim: int

    def to(self, like: Tensor) -> _Factors:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(dtype=like.dtype, device=like.device)

        return _Factors(move(self.proj), move(self.q_bias), move(self.v_bias), move(self.W),
                        move(self.out_bias), self.rank, self.num_heads, self.head_dim)


def _truncated_svd(A: Tensor, tol: float) -> tuple[Tensor, Tensor, Tensor]:
    """SVD of a stack ``(H, d, d)`` of float64 matrices of low numerical rank, in ``O(d² r)``.

    A Gaussian sketch ``A Ω`` with ``ℓ`` columns captures the range of ``A``; the sketch is accepted when
    the part of ``A`` outside it has Frobenius norm at most ``tol * σ_max``, else ``ℓ`` doubles. Past
    ``d / 2`` columns the full SVD is cheaper. Singular values beyond the sketch are below ``tol σ_max``.
    """
    d = A.shape[-1]
    generator = torch.Generator(device=A.device).manual_seed(0)
    ell = 16
    while 2 * ell < d:
        omega = torch.randn(d, ell + 8, generator=generator, dtype=A.dtype, device=A.device)
        basis = torch.linalg.qr(A @ omega).Q                                   # (H, d, ℓ + 8)
        small = basis.mT @ A
        U, S, Vh = torch.linalg.svd(small, full_matrices=False)
        outside = torch.linalg.matrix_norm(A - basis @ small)
        if bool((outside <= tol * S[:, 0]).all()):
            return basis @ U, S, Vh
        ell *= 2
    return torch.linalg.svd(A)


def _factor_heads(heads: MultiHead, rtol: float | None) -> _Factors:
    """SVD of each ``A_h`` in float64, truncated at ``rtol * σ_max`` (numerical rank); biases folded in.

    The score bias ``c_h`` of App. E.3 becomes a query bias ``q_h`` with ``K_hᵀ q_h = c_h`` when ``c_h``
    lies in the range of ``K_hᵀ`` (always so for ``c_h = K_hᵀ b_Q``), else an extra rank: a constant
    query coordinate 1 paired with the key coordinate ``<c_h, x_j>``.
    """
    A = heads.A.double()
    H, d, _ = A.shape
    tol = d * torch.finfo(heads.A.dtype).eps if rtol is None else rtol
    U, S, Vh = _truncated_svd(A, tol)
    rank = max(1, int((S > tol * S[:, :1]).sum(1).max()))
    U, S, Vh = U[:, :, :rank], S[:, :rank], Vh[:, :rank]
    root = S.sqrt()
    Q = root.unsqueeze(-1) * Vh                    # (H, r, d)
    K = root.unsqueeze(-1) * U.mT                  # (H, r, d): K_hᵀ Q_h = U S Vᵀ = A_h
    q_bias = None
    if heads.score_bias is not None:
        c = heads.score_bias.double()
        coeff = (U.mT @ c.unsqueeze(-1)).squeeze(-1)            # Uᵀ c
        outside = c - (U @ coeff.unsqueeze(-1)).squeeze(-1)
        if bool((outside.norm(dim=-1) <= tol * c.norm(dim=-1).clamp_min(1e-300)).all()):
            q_bias = coeff / root.clamp_min(torch.finfo(torch.float64).tiny)
        else:
            Q = torch.cat([Q, A.new_zeros(H, 1, d)], 1)
            K = torch.cat([K, c.unsqueeze(1)], 1)
            q_bias = torch.cat([A.new_zeros(H, rank), A.new_ones(H, 1)], 1)
            rank += 1
    V = heads.V.double()
    proj = torch.cat([Q, K, V], 1).reshape(-1, d)
    k = V.shape[1]
    eye = torch.eye(H * k, dtype=heads.W.dtype, device=heads.W.device).view(H * k, H, k).permute(1, 0, 2)
    concat = heads.W.shape == eye.shape and bool(torch.equal(heads.W, eye)) and heads.output_bias is None
    return _Factors(
        proj=proj,
        q_bias=q_bias,
        v_bias=None if heads.value_bias is None else heads.value_bias.double(),
        W=None if concat else heads.W.double(),
        out_bias=None if heads.output_bias is None else heads.output_bias.double(),
        rank=rank,
        num_heads=H,
        head_dim=k,
    )


class _Workspace:
    """One byte buffer for the ``(B, H, n, n)`` scores of a linearization's products, shared by its casts and
    selections (their products run one after another): fresh large allocations cost page faults on every
    product, and a cast's buffer of its own would cost them again. It is made, on first use, large enough for
    the linearization it was created with (``size`` bytes), so a low-precision twin used first does not leave it
    too small for the full-precision products."""

    def __init__(self, size: int) -> None:
        self.size: int = size
        self.buffer: Tensor | None = None

    def like(self, P: Tensor) -> Tensor:
        """A scratch tensor of ``P``'s shape, dtype and device (its contents are undefined)."""
        size = P.numel() * P.element_size()
        if self.buffer is None or self.buffer.numel() < size or self.buffer.device != P.device:
            self.buffer = torch.empty(max(size, self.size), dtype=torch.uint8, device=P.device)
        return self.buffer[:size].view(P.dtype).view(P.shape)


class AttentionLinearization(ClosedForm):
    """Lemma C.2 for multi-head attention (Def 2.2; masked: Lemma D.1; biased: Lemma E.2) at a batch ``X``.

    One forward pass stores, per head, ``P``, the projections ``Q X + q``, ``K X``, ``V X + b`` and the
    head outputs ``O = P (V X + b)``; then ``jvp(E) = D_X f(E)`` and ``vjp(G) = D_X fᵀ(G)`` cost a few
    batched matrix products each, with no autograd graph. ``select(index)`` keeps the inputs ``index``.
    """

    batched = ("P", "Qx", "Kx", "Vx", "Oh")

    def __init__(self, factors: _Factors, P: Tensor, Qx: Tensor, Kx: Tensor, Vx: Tensor, Oh: Tensor,
                 output: Tensor) -> None:
        self.factors, self.P, self.Qx, self.Kx, self.Vx, self.Oh = factors, P, Qx, Kx, Vx, Oh
        self.output = output
        self._work = _Workspace(P.numel() * P.element_size())

    def _scores_buffer(self) -> Tensor:
        """The reusable ``(B, H, n, n)`` scratch of the products (:class:`_Workspace`)."""
        return self._work.like(self.P)

    @classmethod
    def at(cls, factors: _Factors, X: Tensor, masked: bool) -> AttentionLinearization:
        """The forward pass at ``X`` ``(B, n, d)``: attention matrices and projections of every head."""
        F = factors.to(X)
        B, n, _ = X.shape
        r, H, k = F.rank, F.num_heads, F.head_dim
        proj = (X @ F.proj.mT).view(B, n, H, 2 * r + k).transpose(1, 2)      # (B, H, n, 2r + k)
        Qx, Kx, Vx = proj.split([r, r, k], dim=-1)
        if F.q_bias is not None:
            Qx = Qx + F.q_bias.unsqueeze(1)
        if F.v_bias is not None:
            Vx = Vx + F.v_bias.unsqueeze(1)
        scores = Qx @ Kx.mT
        P = torch.softmax(mask_future(scores) if masked else scores, dim=-1)
        Oh = P @ Vx
        lin = cls(F, P, Qx.contiguous(), Kx.contiguous(), Vx.contiguous(), Oh, X.new_empty(0))
        out = lin._combine(Oh)
        lin.output = out if F.out_bias is None else out + F.out_bias
        return lin

    def _combine(self, heads_out: Tensor) -> Tensor:
        """``sum_h W_h o_h`` of per-head outputs ``(B, H, n, k)``, or their concatenation, ``(B, n, d_out)``."""
        B, H, n, k = heads_out.shape
        if self.factors.W is None:
            return heads_out.transpose(1, 2).reshape(B, n, H * k)
        return torch.einsum("bhnk,hek->bne", heads_out, self.factors.W)

    def _split(self, G: Tensor) -> Tensor:
        """Adjoint of :meth:`_combine`: ``(B, n, d_out)`` to per-head ``W_hᵀ g`` ``(B, H, n, k)``."""
        H, k = self.Vx.shape[1], self.Vx.shape[3]
        if self.factors.W is None:
            return G.view(G.shape[0], G.shape[1], H, k).transpose(1, 2)
        return torch.einsum("bne,hek->bhnk", G, self.factors.W)

    def jvp(self, E: Tensor) -> Tensor:
        """``D_X f(E)``: Lemma C.2 term by term, with ``dS = dQ Kᵀ + Q dKᵀ`` and ``dP = P ⊙ (dS - P dS)``."""
        B, n, _ = E.shape
        r, k = self.Qx.shape[-1], self.Vx.shape[-1]
        H = self.Vx.shape[1]
        # One copy puts the heads first; dQ, dK, dV are then strided views that the products read as is.
        dproj = (E @ self.factors.proj.mT).view(B, n, H, 2 * r + k).transpose(1, 2).contiguous()
        dQ, dK, dV = dproj.split([r, r, k], dim=-1)
        dS = torch.matmul(dQ, self.Kx.mT, out=self._scores_buffer())
        flat = dS.view(B * H, n, n)
        torch.baddbmm(flat, self.Qx.view(B * H, n, r), dK.reshape(B * H, n, r).mT, out=flat)
        T = dS.mul_(self.P)
        dO = T @ self.Vx
        dO.sub_(T.sum(-1, keepdim=True) * self.Oh)
        flat = dO.view(B * H, n, k)
        torch.baddbmm(flat, self.P.view(B * H, n, n), dV.reshape(B * H, n, k), out=flat)
        return self._combine(dO)

    def vjp(self, G: Tensor) -> Tensor:
        """``D_X fᵀ(G)``: the adjoint of :meth:`jvp`, ``dS = P ⊙ (dO Vᵀ - <dO_i, O_i>)``."""
        B, n = G.shape[:2]
        r, k = self.Qx.shape[-1], self.Vx.shape[-1]
        H = self.Vx.shape[1]
        dO = self._split(G).contiguous()
        dS = torch.matmul(dO, self.Vx.mT, out=self._scores_buffer())
        dS.sub_((dO * self.Oh).sum(-1, keepdim=True)).mul_(self.P)
        # The three cotangents go straight to the token-major layout of the projection matrix.
        grads = G.new_empty(B, n, H, 2 * r + k)
        grads[..., :r].copy_((dS @ self.Kx).transpose(1, 2))
        grads[..., r:2 * r].copy_((dS.mT @ self.Qx).transpose(1, 2))
        grads[..., 2 * r:].copy_((self.P.mT @ dO).transpose(1, 2))
        return grads.view(B, n, -1) @ self.factors.proj

    def _cast(self, dtype: torch.dtype) -> AttentionLinearization:
        """The declared fields and the layer's factors in ``dtype`` (the same workspace)."""
        lin = super()._cast(dtype)
        lin.factors = self.factors.to(lin.P)
        return lin

@dataclass(frozen=True, eq=False)
class MultiHeadMap:
    """Multi-head attention (Def 2.2, masked: Def 2.5) as a callable map that knows its Jacobian.

    Each ``A_h`` is factored once (float64 SVD, truncated at its numerical rank ``rtol * σ_max``, default
    ``d * eps`` of the parameters' dtype: for float32 parameters the float32 rounding of ``A_h = K_hᵀ Q_h`` is
    dropped), so the products cost ``O(n d H r + n² H r)`` with ``r = rank A_h`` (``k`` for a real layer
    instead of ``d``). ``MultiHeadMap(heads, masked)(X)`` is the map of these factors,
    ``multihead_attention(X, heads, masked=masked)`` up to the truncation, in ``X``'s dtype and device, so
    the closed-form :class:`AttentionLinearization` (Lemma C.2) of ``linearize(X)``, which
    :func:`lipnb.local_lipschitz` uses instead of automatic differentiation, is the Jacobian of the map
    called (and of its float64 evaluation, ``exact_local_lipschitz``'s ground truth).
    """

    heads: MultiHead
    masked: bool = False
    rtol: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_factors", _factor_heads(self.heads, self.rtol))

    def _check(self, X: Tensor) -> None:
        check_tokens(X)
        if X.shape[-1] != self.heads.A.shape[-1]:
            raise ValueError(f"tokens have d = {X.shape[-1]} but the heads expect d = {self.heads.A.shape[-1]}")

    def __call__(self, X: Tensor) -> Tensor:
        self._check(X)
        return AttentionLinearization.at(self._factors, X, self.masked).output

    def flops(self, n: int) -> dict[str, int]:
        """Matrix-product FLOPs per input of length ``n``: the ``linearize`` forward pass and one ``JᵀJ`` product.

        With ``p = H (2r + k)`` projection rows: the forward pass costs ``2 n d p + 2 n² H (r + k)``, a
        product ``4 n d p + 8 n² H (r + k)`` (``"attention"``: its second term), plus ``2 n H k d_out`` per
        application of the output blocks.
        """
        n = check_positive_int(n, "n")
        F = self._factors
        H, r, k = F.num_heads, F.rank, F.head_dim
        d, p = F.proj.shape[1], F.proj.shape[0]
        out = 0 if F.W is None else 2 * n * H * k * F.W.shape[1]
        return {"linearize": 2 * n * d * p + 2 * n * n * H * (r + k) + out,
                "product": 4 * n * d * p + 8 * n * n * H * (r + k) + 2 * out,
                "attention": 8 * n * n * H * (r + k)}

    def linearize(self, X: Tensor) -> AttentionLinearization:
        """Lemma C.2 at the batch ``X``: reusable closed-form ``jvp`` and ``vjp`` (no autograd)."""
        self._check(X)
        with torch.no_grad():
            return AttentionLinearization.at(self._factors, X.detach(), self.masked)
