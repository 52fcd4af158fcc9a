"""Attention maps of :mod:`lipnb.core.attention` against naive formulas, autograd and the definitions.

Def 2.1 (single head), Def 2.2 (multi-head), Def 2.5 (masked), Def C.4 (weighted), App. E.3
(biases, Remark E.1) and the closed-form differential of Lemma C.2 / D.1 / C.6 / E.2, both
``lemma_c_2_jvp`` and the factored products of ``MultiHeadMap`` used by ``local_lipschitz``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given
from torch import Tensor

from lipnb.core.attention import MultiHead, attention_matrix, multihead_attention, self_attention
from lipnb.core.jacobian import MultiHeadMap, concat_heads, lemma_c_2_jvp

F64 = torch.float64


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = F64) -> Tensor:
    """Standard normal tensor drawn from ``gen``."""
    return torch.randn(*shape, generator=gen, dtype=F64).to(dtype)


def naive_head(
    x: Tensor,
    A: Tensor,
    V: Tensor,
    *,
    score_bias: Tensor | None = None,
    value_bias: Tensor | None = None,
    masked: bool = False,
    weights: Tensor | None = None,
) -> Tensor:
    """One head on one sequence ``x`` ``(n, d)`` by explicit loops over tokens, in float64.

    ``out_i = sum_j w_j exp(s_ij) (V x_j + b) / sum_l w_l exp(s_il)`` with
    ``s_ij = sum_{k,l} A_kl x_il x_jk + <c, x_j>`` and ``j <= i`` when masked.
    """
    x, A, V = x.double(), A.double(), V.double()
    n, d = x.shape
    out = torch.zeros(n, V.shape[0], dtype=F64)
    for i in range(n):
        numerator = torch.zeros(V.shape[0], dtype=F64)
        denominator = 0.0
        for j in range(i + 1 if masked else n):
            s = 0.0
            for k in range(d):
                for m in range(d):
                    s += float(A[k, m]) * float(x[i, m]) * float(x[j, k])
            if score_bias is not None:
                s += sum(float(score_bias[k]) * float(x[j, k]) for k in range(d))
            e = math.exp(s) * (1.0 if weights is None else float(weights[j]))
            value = V @ x[j] if value_bias is None else V @ x[j] + value_bias.double()
            numerator += e * value
            denominator += e
        out[i] = numerator / denominator
    return out


def random_heads(gen: torch.Generator, H: int, d: int, k: int, d_out: int, *, biases: bool) -> MultiHead:
    """A random multi-head layer of scale O(1), with or without all three biases."""
    A = randn(gen, H, d, d) / d
    V = randn(gen, H, k, d) / math.sqrt(d)
    W = randn(gen, H, d_out, k) / math.sqrt(k)
    if not biases:
        return MultiHead(A=A, V=V, W=W)
    return MultiHead(A=A, V=V, W=W, score_bias=randn(gen, H, d), value_bias=randn(gen, H, k),
                     output_bias=randn(gen, d_out))


# --------------------------------------------------------------------------- Def 2.1, 2.5, C.4


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_self_attention_matches_naive_loop(gen: torch.Generator, masked: bool, weighted: bool) -> None:
    """Def 2.1 / 2.5 / C.4: ``self_attention`` equals the explicit exp/sum formula, token by token."""
    B, n, d, dv = 3, 5, 3, 2
    X = randn(gen, B, n, d)
    A, V = randn(gen, d, d) / 2, randn(gen, dv, d)
    w = torch.rand(n, generator=gen, dtype=F64) + 0.1 if weighted else None
    out = self_attention(X, A, V, masked=masked, weights=w)
    assert out.shape == (B, n, dv)
    for b in range(B):
        ref = naive_head(X[b], A, V, masked=masked, weights=w)
        torch.testing.assert_close(out[b], ref, rtol=1e-12, atol=1e-12)


def test_per_sequence_weights(gen: torch.Generator) -> None:
    """Def C.4: weights of shape ``(B, n)`` apply one simplex vector per batch element."""
    X = randn(gen, 2, 4, 3)
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    w = torch.rand(2, 4, generator=gen, dtype=F64) + 0.1
    out = self_attention(X, A, V, weights=w)
    for b in range(2):
        torch.testing.assert_close(out[b], naive_head(X[b], A, V, weights=w[b]), rtol=1e-12, atol=1e-12)


def test_weights_are_scale_invariant(gen: torch.Generator) -> None:
    """Def C.4: only the normalised weights ``w / sum w`` matter."""
    X = randn(gen, 2, 4, 3)
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    w = torch.rand(4, generator=gen, dtype=F64) + 0.1
    torch.testing.assert_close(self_attention(X, A, V, weights=w), self_attention(X, A, V, weights=7.5 * w))


def test_uniform_weights_are_plain_attention(gen: torch.Generator) -> None:
    """Def C.4 with ``w = 1/n`` is Def 2.1."""
    X = randn(gen, 2, 4, 3)
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    torch.testing.assert_close(self_attention(X, A, V, weights=torch.full((4,), 0.25, dtype=F64)),
                               self_attention(X, A, V))


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6), d=st.integers(1, 4),
       scale=st.floats(0.0, 5.0), masked=st.booleans())
def test_attention_matrix_is_row_stochastic(seed: int, n: int, d: int, scale: float, masked: bool) -> None:
    """Def 2.1 / 2.5: ``P`` has non-negative rows summing to one, lower triangular when masked."""
    gen = torch.Generator().manual_seed(seed)
    X = scale * randn(gen, 2, n, d)
    P = attention_matrix(X, randn(gen, d, d), masked=masked)
    assert P.shape == (2, n, n)
    assert bool((P >= 0).all())
    torch.testing.assert_close(P.sum(-1), torch.ones(2, n, dtype=F64))
    if masked:
        assert bool((P.triu(1) == 0).all())
        assert bool((P[:, 0, 0] == 1).all())


# --------------------------------------------------------------------------- Def 2.2, App. E.3


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("biases", [False, True])
def test_multihead_matches_per_head_loop(gen: torch.Generator, masked: bool, biases: bool) -> None:
    """Def 2.2 with App. E.3 biases: ``sum_h W_h f_h(X)_i + b_O``, each head by the naive loop."""
    B, n, d, H, k, d_out = 2, 4, 4, 3, 2, 5
    heads = random_heads(gen, H, d, k, d_out, biases=biases)
    X = randn(gen, B, n, d)
    out = multihead_attention(X, heads, masked=masked)
    assert out.shape == (B, n, d_out)
    for b in range(B):
        ref = torch.zeros(n, d_out, dtype=F64)
        for h in range(H):
            head = naive_head(
                X[b], heads.A[h], heads.V[h], masked=masked,
                score_bias=None if heads.score_bias is None else heads.score_bias[h],
                value_bias=None if heads.value_bias is None else heads.value_bias[h],
            )
            ref += head @ heads.W[h].mT
        if heads.output_bias is not None:
            ref += heads.output_bias
        torch.testing.assert_close(out[b], ref, rtol=1e-12, atol=1e-12)


def test_multihead_weighted_matches_per_head_loop(gen: torch.Generator) -> None:
    """Def 2.2 with Def C.4 weights: every head uses the same weighted softmax."""
    heads = random_heads(gen, 2, 3, 2, 3, biases=True)
    X = randn(gen, 1, 4, 3)
    w = torch.rand(4, generator=gen, dtype=F64) + 0.1
    out = multihead_attention(X, heads, weights=w)
    ref = sum(naive_head(X[0], heads.A[h], heads.V[h], score_bias=heads.score_bias[h],
                         value_bias=heads.value_bias[h], weights=w) @ heads.W[h].mT for h in range(2))
    torch.testing.assert_close(out[0], ref + heads.output_bias, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_single_head_with_identity_output_is_self_attention(gen: torch.Generator, masked: bool) -> None:
    """Def 2.2 with ``H = 1``, ``W = I`` is Def 2.1 (both via ``MultiHead.single`` and by hand)."""
    d, dv = 3, 2
    A, V = randn(gen, d, d), randn(gen, dv, d)
    X = randn(gen, 2, 5, d)
    ref = self_attention(X, A, V, masked=masked)
    torch.testing.assert_close(multihead_attention(X, MultiHead.single(A, V), masked=masked), ref)
    by_hand = MultiHead(A=A[None], V=V[None], W=torch.eye(dv, dtype=F64)[None])
    torch.testing.assert_close(multihead_attention(X, by_hand, masked=masked), ref)


def test_from_projections_scores_and_key_bias_invariance(gen: torch.Generator) -> None:
    """App. E.3 / Remark E.1: ``P`` is softmax of ``<Q x_i + b_Q, K x_j + b_K> / sqrt(k)``, whatever ``b_K``."""
    H, k, d, n = 2, 3, 4, 5
    Q, K, V, W = randn(gen, H, k, d), randn(gen, H, k, d), randn(gen, H, k, d), randn(gen, H, d, k)
    bq, bk = randn(gen, H, k), 10 * randn(gen, H, k)
    heads = MultiHead.from_projections(Q, K, V, W, q_bias=bq)
    X = randn(gen, 2, n, d)
    P = attention_matrix(X, heads.A, score_bias=heads.score_bias)
    for h in range(H):
        q = X @ Q[h].mT + bq[h]
        key = X @ K[h].mT + bk[h]
        ref = torch.softmax(q @ key.mT / math.sqrt(k), dim=-1)
        torch.testing.assert_close(P[:, h], ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(heads.A, K.mT @ Q / math.sqrt(k))


def test_from_projections_reproduces_torch_multihead_attention(gen: torch.Generator) -> None:
    """Def 2.2 + App. E.3: ``nn.MultiheadAttention`` (with all biases) equals our parametrisation."""
    d, H = 6, 2
    k = d // H
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(d, H, bias=True, batch_first=True).double()
    with torch.no_grad():  # make every bias nonzero, the key bias included
        mha.in_proj_bias.copy_(randn(gen, 3 * d))
        mha.out_proj.bias.copy_(randn(gen, d))
    Wi, bi = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()

    def per_head(M: Tensor) -> Tensor:
        return M.reshape(H, k, *M.shape[1:])

    heads = MultiHead.from_projections(
        per_head(Wi[:d]), per_head(Wi[d:2 * d]), per_head(Wi[2 * d:]),
        mha.out_proj.weight.detach().reshape(d, H, k).permute(1, 0, 2),
        q_bias=per_head(bi[:d]), v_bias=per_head(bi[2 * d:]), o_bias=mha.out_proj.bias.detach(),
    )
    X = randn(gen, 3, 5, d)
    with torch.no_grad():
        ref = mha(X, X, X, need_weights=False)[0]
    torch.testing.assert_close(multihead_attention(X, heads), ref, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- Lemma C.2 / D.1 / C.6 / E.2


@pytest.mark.parametrize(
    ("masked", "weighted", "biased"),
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True),
     (True, True, True)],
    ids=["C.2", "D.1-masked", "C.6-weighted", "E.2-score-bias", "all"],
)
def test_lemma_c_2_matches_autograd(gen: torch.Generator, masked: bool, weighted: bool, biased: bool) -> None:
    """Lemma C.2 (D.1, C.6, E.2): the closed-form ``D_X f(E)`` equals ``torch.func.jvp`` of the map."""
    B, n, d, dv = 3, 5, 3, 4
    X = 1.5 * randn(gen, B, n, d)
    E = randn(gen, B, n, d)
    A, V = randn(gen, d, d), randn(gen, dv, d)
    c = randn(gen, d) if biased else None
    w = torch.rand(n, generator=gen, dtype=F64) + 0.1 if weighted else None

    def f(Z: Tensor) -> Tensor:
        return attention_matrix(Z, A, score_bias=c, masked=masked, weights=w) @ Z @ V.mT

    if not biased:
        torch.testing.assert_close(f(X), self_attention(X, A, V, masked=masked, weights=w))
    _, reference = torch.func.jvp(f, (X,), (E,))
    closed = lemma_c_2_jvp(X, A, V, E, score_bias=c, masked=masked, weights=w)
    torch.testing.assert_close(closed, reference, rtol=1e-10, atol=1e-12)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 5), d=st.integers(1, 3), scale=st.floats(0.0, 3.0),
       masked=st.booleans())
def test_lemma_c_2_property(seed: int, n: int, d: int, scale: float, masked: bool) -> None:
    """Lemma C.2 / D.1 for all small inputs: closed form equals autograd."""
    gen = torch.Generator().manual_seed(seed)
    X, E = scale * randn(gen, 1, n, d), randn(gen, 1, n, d)
    A, V = randn(gen, d, d), randn(gen, d, d)
    _, reference = torch.func.jvp(lambda Z: self_attention(Z, A, V, masked=masked), (X,), (E,))
    torch.testing.assert_close(lemma_c_2_jvp(X, A, V, E, masked=masked), reference, rtol=1e-9, atol=1e-10)


def _map_heads(kind: str, gen: torch.Generator) -> MultiHead:
    """Layers exercising each path of ``MultiHeadMap``'s factorisation ``A_h = K_hᵀ Q_h`` (rank ``k < d``)."""
    H, k, d = 2, 2, 4
    heads = MultiHead.from_projections(randn(gen, H, k, d), randn(gen, H, k, d), randn(gen, H, k, d),
                                       randn(gen, H, d, k), q_bias=randn(gen, H, k), v_bias=randn(gen, H, k),
                                       o_bias=randn(gen, d))
    if kind == "biased":  # score bias K_hᵀ b_Q: in the range of A_h's left factor
        return heads
    if kind == "score-bias-off-range":  # a generic c_h is not in the range of the rank-2 A_h: an extra rank
        return MultiHead(A=heads.A, V=heads.V, W=heads.W, score_bias=randn(gen, H, d),
                         value_bias=heads.value_bias, output_bias=heads.output_bias)
    if kind == "concat":  # heads side by side (BERT's self-attention output), W_h = identity blocks
        return concat_heads(heads)
    if kind == "full-rank":
        return MultiHead.single(randn(gen, d, d), randn(gen, 3, d))
    assert kind == "zero-A"  # uniform attention: rank 0 scores
    return MultiHead(A=torch.zeros(1, d, d, dtype=F64), V=randn(gen, 1, 3, d), W=randn(gen, 1, 2, 3))


MAP_KINDS = ["biased", "score-bias-off-range", "concat", "full-rank", "zero-A"]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kind", MAP_KINDS)
def test_multihead_map_closed_form_products(gen: torch.Generator, kind: str, masked: bool) -> None:
    """Lemma C.2 / D.1 / E.2 in ``MultiHeadMap``: output, ``jvp`` and ``vjp`` equal autograd of Def 2.2."""
    heads = _map_heads(kind, gen)
    X = torch.cat([s * randn(gen, 2, 5, 4) for s in (0.1, 1.0, 3.0)])

    def f(Z: Tensor) -> Tensor:
        return multihead_attention(Z, heads, masked=masked)

    fmap = MultiHeadMap(heads, masked=masked)
    lin = fmap.linearize(X)
    ref = f(X)
    torch.testing.assert_close(fmap(X), ref, rtol=1e-12, atol=1e-12)      # the factors it linearizes
    torch.testing.assert_close(lin.output, ref, rtol=1e-12, atol=1e-12)
    E, G = randn(gen, *X.shape), randn(gen, *ref.shape)
    _, JE = torch.func.jvp(f, (X,), (E,))
    _, vjp = torch.func.vjp(f, X)
    (JtG,) = vjp(G)
    torch.testing.assert_close(lin.jvp(E), JE, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lin.vjp(G), JtG, rtol=1e-10, atol=1e-12)
    index = torch.tensor([4, 1])
    sub = lin.select(index)
    torch.testing.assert_close(sub.jvp(E[index]), JE[index], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(sub.vjp(G[index]), JtG[index], rtol=1e-10, atol=1e-12)


def test_multihead_map_float32_and_huge_scores(gen: torch.Generator) -> None:
    """``MultiHeadMap`` follows a float32 input (factors cast once) and stays finite at scores ~1e6."""
    heads = _map_heads("score-bias-off-range", gen)
    fmap = MultiHeadMap(heads, masked=True)
    X = randn(gen, 2, 5, 4)
    lin = fmap.linearize(X.float())
    assert lin.output.dtype == fmap(X.float()).dtype == torch.float32
    torch.testing.assert_close(lin.output.double(), multihead_attention(X, heads, masked=True),
                               rtol=1e-5, atol=1e-5)
    big = MultiHeadMap(MultiHead(A=1e4 * heads.A, V=heads.V, W=heads.W), masked=False).linearize(100 * X)
    E = randn(gen, *X.shape)
    assert bool(torch.isfinite(big.output).all())
    assert bool(torch.isfinite(big.jvp(E)).all())
    assert bool(torch.isfinite(big.vjp(big.output)).all())


# --------------------------------------------------------------------------- stability (Theorem 3.7 regime)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [False, True])
def test_huge_scores_are_finite_and_hard_argmax(gen: torch.Generator, dtype: torch.dtype, masked: bool) -> None:
    """Theorem 3.7 regime: scores of size 1e6 give finite outputs equal to ``V x_{m_i}`` (hard argmax)."""
    n, d = 5, 3
    X = (600 * randn(gen, 2, n, d)).to(dtype)  # scores <x_i, x_j> of order 1e6
    A, V = torch.eye(d, dtype=dtype), randn(gen, d, d, dtype=dtype)
    scores = X @ X.mT
    assert float(scores.abs().max()) > 1e6
    out = self_attention(X, A, V, masked=masked)
    assert out.dtype == dtype
    assert bool(torch.isfinite(out).all())
    if masked:
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    top2 = scores.double().topk(2, dim=-1).values
    assert float((top2[..., 0] - top2[..., 1])[..., 1:].min()) > 100  # e^{-100}: a hard argmax
    m = scores.argmax(-1)
    assert bool((m != torch.arange(n)).any())  # not only every token attending to itself
    hard = torch.gather(X @ V.mT, 1, m.unsqueeze(-1).expand(-1, -1, d))
    torch.testing.assert_close(out, hard)
    jvp = lemma_c_2_jvp(X, A, V, torch.ones_like(X), masked=masked)
    assert bool(torch.isfinite(jvp).all())


def test_huge_scores_with_weights_and_bias_are_finite(gen: torch.Generator) -> None:
    """Def C.4 / App. E.3 at scores 1e6: no overflow, no NaN."""
    heads = random_heads(gen, 2, 3, 2, 3, biases=True)
    heads = MultiHead(A=1e6 * heads.A, V=heads.V, W=heads.W, score_bias=1e6 * heads.score_bias,
                      value_bias=heads.value_bias, output_bias=heads.output_bias)
    X = randn(gen, 2, 4, 3)
    w = torch.tensor([1e-3, 1.0, 2.0, 0.5], dtype=F64)
    assert bool(torch.isfinite(multihead_attention(X, heads, weights=w)).all())
    assert bool(torch.isfinite(multihead_attention(X.float(), heads.to(torch.float32), masked=True)).all())


# --------------------------------------------------------------------------- permutation equivariance, causality


@given(seed=st.integers(0, 2**31 - 1), perm=st.permutations(range(5)), scale=st.floats(0.0, 3.0))
def test_unmasked_attention_is_permutation_equivariant(seed: int, perm: list[int], scale: float) -> None:
    """Def 2.1 / 2.2 / C.4: permuting tokens (and their weights) permutes the outputs."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor(perm)
    X = scale * randn(gen, 2, 5, 3)
    A, V = randn(gen, 3, 3), randn(gen, 2, 3)
    torch.testing.assert_close(self_attention(X[:, p], A, V), self_attention(X, A, V)[:, p])
    w = torch.rand(5, generator=gen, dtype=F64) + 0.1
    torch.testing.assert_close(self_attention(X[:, p], A, V, weights=w[p]),
                               self_attention(X, A, V, weights=w)[:, p])
    heads = random_heads(gen, 2, 3, 2, 4, biases=True)
    torch.testing.assert_close(multihead_attention(X[:, p], heads), multihead_attention(X, heads)[:, p])


def test_masked_attention_is_not_permutation_equivariant(gen: torch.Generator) -> None:
    """Def 2.5: the causal mask breaks permutation equivariance (here: reversing the sequence)."""
    X = randn(gen, 1, 4, 3)
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    p = torch.arange(3, -1, -1)
    gap = (self_attention(X[:, p], A, V, masked=True) - self_attention(X, A, V, masked=True)[:, p]).abs().max()
    assert float(gap) > 1e-3


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 6), i=st.integers(0, 4))
def test_masked_output_depends_only_on_the_past(seed: int, n: int, i: int) -> None:
    """Def 2.5: ``f^m(X)_i = f(x_1..x_i)_i``; changing later tokens leaves outputs ``<= i`` unchanged."""
    i = min(i, n - 2)
    gen = torch.Generator().manual_seed(seed)
    X = randn(gen, 1, n, 3)
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    Y = X.clone()
    Y[:, i + 1:] = randn(gen, 1, n - i - 1, 3)
    out = self_attention(X, A, V, masked=True)
    torch.testing.assert_close(self_attention(Y, A, V, masked=True)[:, : i + 1], out[:, : i + 1])
    torch.testing.assert_close(out[:, i], self_attention(X[:, : i + 1], A, V)[:, i])
    torch.testing.assert_close(out[:, 0], X[:, 0] @ V.mT)


# --------------------------------------------------------------------------- dtype / device


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_outputs_follow_input_dtype(gen: torch.Generator, dtype: torch.dtype) -> None:
    """Module docstring: every function follows the dtype and device of its input."""
    X = randn(gen, 2, 4, 3, dtype=dtype)
    A, V = randn(gen, 3, 3, dtype=dtype), randn(gen, 2, 3, dtype=dtype)
    heads = random_heads(gen, 2, 3, 2, 3, biases=True).to(dtype)
    outs = [attention_matrix(X, A), self_attention(X, A, V, weights=torch.ones(4)),
            multihead_attention(X, heads), lemma_c_2_jvp(X, A, V, X)]
    for out in outs:
        assert out.dtype == dtype
        assert out.device == X.device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(gen: torch.Generator) -> None:
    """Every function runs on the input's device and agrees with the CPU result."""
    X, A, V = randn(gen, 2, 4, 3), randn(gen, 3, 3), randn(gen, 2, 3)
    out = self_attention(X.cuda(), A.cuda(), V.cuda(), masked=True, weights=torch.ones(4))
    assert out.device.type == "cuda"
    torch.testing.assert_close(out.cpu(), self_attention(X, A, V, masked=True))
    heads = random_heads(gen, 2, 3, 2, 3, biases=True)
    torch.testing.assert_close(multihead_attention(X.cuda(), heads.to("cuda")).cpu(), multihead_attention(X, heads))


# --------------------------------------------------------------------------- bad input


def _bad_calls() -> list[tuple[str, Callable[[], object], str]]:
    gen = torch.Generator().manual_seed(0)
    X, A, V = randn(gen, 2, 4, 3), randn(gen, 3, 3), randn(gen, 2, 3)
    nan, inf = float("nan"), float("inf")
    Xn = X.clone()
    Xn[0, 1, 2] = nan
    An = A.clone()
    An[1, 1] = inf
    Vn = V.clone()
    Vn[0, 0] = nan
    return [
        ("X-nan", lambda: self_attention(Xn, A, V), "NaN or inf"),
        ("X-inf", lambda: attention_matrix(X * inf, A), "NaN or inf"),
        ("A-inf", lambda: self_attention(X, An, V), "A contains NaN or inf"),
        ("V-nan", lambda: self_attention(X, A, Vn), "V contains NaN or inf"),
        ("X-rank-2", lambda: self_attention(X[0], A, V), "shape \\(batch, n, d\\)"),
        ("X-rank-4", lambda: self_attention(X[None], A, V), "shape \\(batch, n, d\\)"),
        ("n-zero", lambda: self_attention(X[:, :0], A, V), "n = 0"),
        ("d-zero", lambda: attention_matrix(X[..., :0], A[:0, :0]), "d = 0"),
        ("empty-batch", lambda: attention_matrix(X[:0], A), "empty batch"),
        ("A-not-square", lambda: self_attention(X, A[:, :2], V), "square"),
        ("A-rank-1", lambda: self_attention(X, A[0], V), "square"),
        ("A-wrong-d", lambda: self_attention(X, A[:2, :2], V), "d = 3"),
        ("V-wrong-d", lambda: self_attention(X, A, V[:, :2]), "V is \\(2, 2\\)"),
        ("V-rank-1", lambda: self_attention(X, A, V[0]), "V must have 2 dimensions"),
        ("weights-shape", lambda: self_attention(X, A, V, weights=torch.ones(5)), "weights must have shape"),
        ("weights-batch", lambda: self_attention(X, A, V, weights=torch.ones(3, 4)), "weights must have shape"),
        ("weights-zero", lambda: self_attention(X, A, V, weights=torch.tensor([1.0, 0, 1, 1])), "positive"),
        ("weights-negative", lambda: self_attention(X, A, V, weights=-torch.ones(4)), "positive"),
        ("weights-nan", lambda: self_attention(X, A, V, weights=torch.tensor([1.0, nan, 1, 1])), "finite"),
        ("E-shape", lambda: lemma_c_2_jvp(X, A, V, X[:, :3]), "E must have the shape of X"),
        ("heads-X-wrong-d", lambda: multihead_attention(randn(gen, 1, 4, 5), MultiHead.single(A, V)), "d = 5"),
        ("MH-A-not-square", lambda: MultiHead(randn(gen, 2, 3, 2), randn(gen, 2, 2, 3), randn(gen, 2, 3, 2)),
         "square"),
        ("MH-V-shape", lambda: MultiHead(randn(gen, 2, 3, 3), randn(gen, 2, 2, 4), randn(gen, 2, 3, 2)),
         "V must be \\(H, k, d\\)"),
        ("MH-W-shape", lambda: MultiHead(randn(gen, 2, 3, 3), randn(gen, 2, 2, 3), randn(gen, 2, 3, 3)),
         "W must be \\(H, d_out, k\\)"),
        ("MH-bias-shape", lambda: MultiHead(randn(gen, 2, 3, 3), randn(gen, 2, 2, 3), randn(gen, 2, 3, 2),
                                            value_bias=randn(gen, 2, 3)), "value_bias must have shape"),
        ("MH-nan", lambda: MultiHead(randn(gen, 2, 3, 3), randn(gen, 2, 2, 3) * nan, randn(gen, 2, 3, 2)),
         "V contains NaN or inf"),
        ("MH-rank", lambda: MultiHead(A, randn(gen, 2, 2, 3), randn(gen, 2, 3, 2)), "A must have 3 dimensions"),
        ("map-wrong-d", lambda: MultiHeadMap(MultiHead.single(A, V)).linearize(randn(gen, 1, 4, 5)), "d = 5"),
        ("map-X-nan", lambda: MultiHeadMap(MultiHead.single(A, V)).linearize(Xn), "NaN or inf"),
    ]


@pytest.mark.parametrize(("call", "message"), [c[1:] for c in _bad_calls()], ids=[c[0] for c in _bad_calls()])
def test_bad_input_raises_value_error(call: Callable[[], object], message: str) -> None:
    """Input validation: each bad input raises ``ValueError`` whose message names the problem."""
    with pytest.raises(ValueError, match=message):
        call()


def _bug_calls() -> list[tuple[str, Callable[[], object], str]]:
    gen = torch.Generator().manual_seed(0)
    X, A, V = randn(gen, 2, 4, 3), randn(gen, 3, 3), randn(gen, 2, 3)
    return [
        ("jvp-V-wrong-d", lambda: lemma_c_2_jvp(X, A, V[:, :2], X), "V"),
        ("jvp-V-nan", lambda: lemma_c_2_jvp(X, A, V * float("nan"), X), "V contains NaN or inf"),
        ("score-bias-shape", lambda: attention_matrix(X, A, score_bias=randn(gen, 1)), "score_bias"),
        ("score-bias-nan", lambda: attention_matrix(X, A, score_bias=torch.full((3,), float("nan"))), "score_bias"),
    ]


@pytest.mark.parametrize(("call", "message"), [c[1:] for c in _bug_calls()], ids=[c[0] for c in _bug_calls()])
def test_bug_unvalidated_v_and_score_bias(call: Callable[[], object], message: str) -> None:
    """Regression (was a reported bug): ``lemma_c_2_jvp`` never checks ``V`` and ``attention_matrix`` never checks
    ``score_bias``; a wrong shape broadcasts silently or raises a bare RuntimeError, and NaN propagates."""
    with pytest.raises(ValueError, match=message):
        call()
