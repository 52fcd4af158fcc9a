"""The fast path of :func:`lipnb.local_lipschitz`: closed-form Jacobian products, compaction, chunking.

Lemma C.2 (multi-head: Def 2.2; masked: Lemma D.1; biased: Lemma E.2) in closed form,
:class:`lipnb.core.jacobian.MultiHeadMap`, checked against dense float64 Jacobians and against the
Hugging Face modules it stands for; batches shrinking as inputs converge and batches split to fit
the device's memory give the same estimates. No test here times anything.
"""

from __future__ import annotations

import copy
import ctypes
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
from conftest import CUDA, assert_flops_counted
from hypothesis import given
from torch import Tensor

import lipnb.core.lipschitz as lipschitz
from lipnb.core import krylov, memory
from lipnb.core.attention import MultiHead, multihead_attention
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix
from lipnb.core.jacobian import AttentionLinearization, MultiHeadMap, concat_heads
from lipnb.core.linearization import Linearizable, Linearization, linearization_bytes, linearize
from lipnb.core.lipschitz import NotConvergedWarning, local_lipschitz
from lipnb.core.normalization import LayerNormLinearization, layer_norm
from lipnb.core.sublayers import ResidualAttentionMap

F64 = torch.float64


def randn(gen: torch.Generator, *shape: int) -> Tensor:
    """Float64 standard normal tensor drawn from ``gen``."""
    return torch.randn(*shape, generator=gen, dtype=F64)


def make_heads(gen: torch.Generator, kind: str, d: int = 6, H: int = 2, k: int = 2) -> MultiHead:
    """Random heads: ``low-rank`` (``A_h = K_hᵀ Q_h``, rank k < d, with every bias), ``full-rank`` ``A_h``,
    ``bias-outside`` (low rank with a score bias outside the range of ``K_hᵀ``), ``no-bias``, ``concat``."""
    if kind == "full-rank":
        return MultiHead(randn(gen, H, d, d) / d, randn(gen, H, k, d), randn(gen, H, d, k),
                         randn(gen, H, d), randn(gen, H, k), randn(gen, d))
    scale = 1 / math.sqrt(d)
    Q, K, V, W = randn(gen, H, k, d) * scale, randn(gen, H, k, d) * scale, randn(gen, H, k, d), randn(gen, H, d, k)
    if kind == "no-bias":
        return MultiHead.from_projections(Q, K, V, W)
    heads = MultiHead.from_projections(Q, K, V, W, q_bias=randn(gen, H, k), v_bias=randn(gen, H, k),
                                       o_bias=randn(gen, d))
    if kind == "bias-outside":
        return MultiHead(heads.A, heads.V, heads.W, randn(gen, H, d), heads.value_bias, heads.output_bias)
    if kind == "concat":
        return concat_heads(heads)
    return heads


KINDS = ["low-rank", "full-rank", "bias-outside", "no-bias", "concat"]


# --------------------------------------------------------------------------- closed form vs dense Jacobian


@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("kind", KINDS)
def test_closed_form_products_match_dense_jacobian(kind: str, masked: bool) -> None:
    """Lemma C.2 / D.1 / E.2: ``jvp(E) = J E`` and ``vjp(G) = Jᵀ G`` with ``J`` the dense float64 Jacobian."""
    gen = torch.Generator().manual_seed(KINDS.index(kind))
    heads = make_heads(gen, kind)
    fn = MultiHeadMap(heads, masked=masked)
    X = 1.5 * randn(gen, 3, 5, 6)
    lin = fn.linearize(X)
    torch.testing.assert_close(lin.output, multihead_attention(X, heads, masked=masked), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fn(X), multihead_attention(X, heads, masked=masked), rtol=1e-12, atol=1e-12)
    J = jacobian_matrix(lambda Z: multihead_attention(Z, heads, masked=masked), X)
    E, G = randn(gen, *X.shape), randn(gen, *lin.output.shape)
    JE = torch.einsum("bij,bj->bi", J, E.flatten(1)).view_as(lin.output)
    JtG = torch.einsum("bij,bi->bj", J, G.flatten(1)).view_as(X)
    torch.testing.assert_close(lin.jvp(E), JE, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(lin.vjp(G), JtG, rtol=1e-10, atol=1e-12)


def test_factorization_rank_and_bias_folding(gen: torch.Generator) -> None:
    """``A_h = K_hᵀ Q_h`` is kept at its rank ``k``; a score bias in the range of ``K_hᵀ`` costs no extra rank,
    one outside it costs exactly one."""
    assert MultiHeadMap(make_heads(gen, "low-rank"))._factors.rank == 2
    assert MultiHeadMap(make_heads(gen, "bias-outside"))._factors.rank == 3
    assert MultiHeadMap(make_heads(gen, "full-rank"))._factors.rank == 6
    assert MultiHeadMap(make_heads(gen, "concat"))._factors.W is None
    assert MultiHeadMap(make_heads(gen, "low-rank"))._factors.W is not None


def test_concat_heads_is_heads_side_by_side(gen: torch.Generator) -> None:
    """``concat_heads``: output block ``h`` is head ``h``'s ``sum_j P_ij (V_h x_j + b_h)``."""
    heads = make_heads(gen, "low-rank")
    X = randn(gen, 2, 4, 6)
    out = multihead_attention(X, concat_heads(heads))
    for h in range(heads.num_heads):
        one = MultiHead(heads.A[h:h + 1], heads.V[h:h + 1], torch.eye(2, dtype=F64)[None],
                        heads.score_bias[h:h + 1], heads.value_bias[h:h + 1])
        torch.testing.assert_close(out[..., 2 * h:2 * h + 2], multihead_attention(X, one), rtol=1e-12, atol=1e-12)


def test_select_is_the_linearization_of_the_sub_batch(gen: torch.Generator) -> None:
    """``select(index)`` equals linearizing ``X[index]`` directly (what compaction relies on)."""
    fn = MultiHeadMap(make_heads(gen, "low-rank"), masked=True)
    X = randn(gen, 5, 4, 6)
    index = torch.tensor([4, 1, 2])
    sub, direct = fn.linearize(X).select(index), fn.linearize(X[index])
    E, G = randn(gen, 3, 4, 6), randn(gen, 3, 4, 6)
    # Not bitwise: a batch of 3 and a batch of 5 may take different matmul kernels; the map is O(1) and
    # well conditioned here, so the two agree to a few float64 rounding steps.
    torch.testing.assert_close(sub.output, direct.output, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(sub.jvp(E), direct.jvp(E), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(sub.vjp(G), direct.vjp(G), rtol=1e-13, atol=1e-13)


def test_casts_and_selections_share_one_scratch_buffer(gen: torch.Generator) -> None:
    """A linearization, its low-precision twin and its selections multiply through one scratch buffer, made at first
    use large enough for the linearization it came from (the twin used first leaves it that large); products made
    in turn through it equal those of fresh linearizations."""
    fn = MultiHeadMap(make_heads(gen, "low-rank"))
    X = randn(gen, 4, 5, 6).float()
    lin = fn.linearize(X)
    low, sub = lin.to(torch.bfloat16), lin.select(torch.tensor([3, 0]))
    u = randn(gen, 4, 5, 6).float()
    low_out = low.vjp(low.jvp(u.bfloat16()))
    assert low._work is lin._work is sub._work and lin._work.buffer.numel() == lin.P.numel() * 4
    out, sub_out = lin.vjp(lin.jvp(u)), sub.vjp(sub.jvp(u[[3, 0]]))
    fresh, fresh_low = fn.linearize(X), fn.linearize(X).to(torch.bfloat16)
    torch.testing.assert_close(out, fresh.vjp(fresh.jvp(u)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sub_out, out[[3, 0]], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(low_out, fresh_low.vjp(fresh_low.jvp(u.bfloat16())))


def test_parameters_follow_the_input_dtype(gen: torch.Generator) -> None:
    """Float32 heads evaluated on a float64 batch run in float64. The float32 rounding of ``A_h = K_hᵀ Q_h``
    makes it full rank with tiny singular values; the default truncation at ``d eps`` drops them (a change
    at the float32 precision of the weights); ``rtol=0`` keeps them and reproduces the map exactly."""
    heads32 = make_heads(gen, "low-rank").to(torch.float32)
    X = randn(gen, 2, 4, 6)
    reference = multihead_attention(X, heads32.to(F64))
    truncated, exact = MultiHeadMap(heads32), MultiHeadMap(heads32, rtol=0.0)
    assert truncated._factors.rank == 2 and exact._factors.rank >= 6
    for fn, tol in ((truncated, 1e-6), (exact, 1e-12)):
        lin = fn.linearize(X)
        assert lin.output.dtype == F64 and fn(X).dtype == F64
        torch.testing.assert_close(lin.output, reference, rtol=tol, atol=tol)


def test_bad_input_raises(gen: torch.Generator) -> None:
    """``linearize`` validates ``X`` like every lipnb map."""
    fn = MultiHeadMap(make_heads(gen, "low-rank"))
    with pytest.raises(ValueError, match="d = 5"):
        fn.linearize(randn(gen, 2, 3, 5))
    with pytest.raises(ValueError, match="NaN or inf"):
        fn.linearize(randn(gen, 2, 3, 6) * float("nan"))


# --------------------------------------------------------------------------- local_lipschitz on the fast path


@pytest.mark.parametrize("method", ["lanczos", "power"])
@pytest.mark.parametrize("kind", ["low-rank", "bias-outside", "concat"])
def test_fast_path_matches_dense_svd(kind: str, method: str) -> None:
    """Lemma 3.1: the closed-form path gives the dense float64 SVD norm (relative error <= 1e-8), masked too."""
    gen = torch.Generator().manual_seed(20 + KINDS.index(kind))
    heads = make_heads(gen, kind)
    radii = torch.tensor([0.3, 1.0, 3.0], dtype=F64).view(-1, 1, 1)
    X = radii * torch.nn.functional.normalize(randn(gen, 3, 5, 6), dim=-1)
    for masked in (False, True):
        fn = MultiHeadMap(heads, masked=masked)
        assert isinstance(fn, Linearizable)
        exact = exact_local_lipschitz(fn, X)
        res = local_lipschitz(fn, X, method=method, tol=1e-6, max_iter=3000, detailed=True)
        assert bool(res.converged.all())
        assert float(((res.value - exact).abs() / exact).max()) <= 1e-8
        assert res.right_vector.shape == X.shape and res.left_vector.shape == fn(X).shape


def test_fast_path_equals_autograd_path(gen: torch.Generator) -> None:
    """Same estimates, iterations and singular vectors whether the products are closed-form or autograd."""
    fn = MultiHeadMap(make_heads(gen, "low-rank"))
    X = 2 * randn(gen, 4, 6, 6)
    fast = local_lipschitz(fn, X, detailed=True)
    slow = local_lipschitz(lambda Z: multihead_attention(Z, fn.heads), X, detailed=True)
    torch.testing.assert_close(fast.value, slow.value, rtol=1e-10, atol=0)
    assert torch.equal(fast.iterations, slow.iterations)
    signs = torch.sign((fast.right_vector * slow.right_vector).flatten(1).sum(1)).view(-1, 1, 1)
    torch.testing.assert_close(fast.right_vector, signs * slow.right_vector, rtol=1e-5, atol=1e-6)


def test_float32_fast_path_within_1e_4(gen: torch.Generator) -> None:
    """Float32 products: relative error <= 1e-4 against the float64 dense SVD, as the default promises."""
    heads = make_heads(gen, "concat")
    X = 2 * randn(gen, 4, 6, 6)
    exact = exact_local_lipschitz(MultiHeadMap(heads), X)
    value = local_lipschitz(MultiHeadMap(heads.to(torch.float32)), X.float())
    assert value.dtype == torch.float32
    assert float(((value.double() - exact).abs() / exact).max()) <= 1e-4


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_presolve_in_bfloat16_keeps_float32_accuracy(gen: torch.Generator, method: str) -> None:
    """A bfloat16 first run only picks the starting vectors: the float32 run still meets its own test, within
    1e-5 of the float64 SVD, and spends fewer float32 products than from a random start."""
    heads = make_heads(gen, "low-rank", d=16, H=3, k=4)
    X = 2 * randn(gen, 4, 24, 16)
    exact = exact_local_lipschitz(MultiHeadMap(heads), X)
    fn = MultiHeadMap(heads.to(torch.float32))
    # The residual tested is recomputed in float64 for the float32 vector: 1e-6 is at float32's own rounding
    # level for this problem on the portable kernels, 1e-5 is a level float32 products can certify.
    plain = local_lipschitz(fn, X.float(), method=method, tol=1e-5, presolve=None, max_iter=2000, detailed=True)
    warm = local_lipschitz(fn, X.float(), method=method, tol=1e-5, presolve=torch.bfloat16, max_iter=2000,
                           detailed=True)
    assert bool(warm.converged.all()) and bool((warm.residual <= 1e-5).all())
    assert bool((warm.presolve_iterations > 0).all()) and bool((plain.presolve_iterations == 0).all())
    assert int(warm.iterations.sum()) < int(plain.iterations.sum())
    assert float(((warm.value.double() - exact).abs() / exact).max()) <= 1e-5


@pytest.mark.slow
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(KINDS), masked=st.booleans(),
       radius=st.floats(0.1, 5.0), n=st.integers(2, 12))
def test_presolve_never_changes_the_answer(seed: int, kind: str, masked: bool, radius: float, n: int) -> None:
    """For every map and input: with or without the bfloat16 presolve, the float32 estimates meet the same
    residual test and agree with the float64 SVD to 1e-5 (the test's 5e-7 plus float32 rounding)."""
    gen = torch.Generator().manual_seed(seed)
    heads = make_heads(gen, kind)
    X = radius * torch.nn.functional.normalize(randn(gen, 2, n, 6), dim=-1)
    exact = exact_local_lipschitz(MultiHeadMap(heads, masked=masked), X)
    fn = MultiHeadMap(heads.to(torch.float32), masked=masked)
    for presolve in (None, torch.bfloat16):
        res = local_lipschitz(fn, X.float(), presolve=presolve, max_iter=500, detailed=True)
        assert bool(res.converged.all())
        assert float(((res.value.double() - exact).abs() / exact).max()) <= 1e-5


class _Skewed:
    """A low-precision twin of ``J`` that multiplies ``J (I + skew R)`` instead, ``R`` moving each token's vector to
    the next token: products wrong by far more than any rounding."""

    casts = True
    shrinks = 1.0

    def __init__(self, inner: AttentionLinearization, skew: float) -> None:
        self.inner, self.skew, self.output = inner, skew, inner.output

    def jvp(self, u: Tensor) -> Tensor:
        return self.inner.jvp(u + self.skew * u.roll(1, dims=1))

    def vjp(self, v: Tensor) -> Tensor:
        g = self.inner.vjp(v)
        return g + self.skew * g.roll(-1, dims=1)

    def select(self, index: Tensor) -> _Skewed:
        return _Skewed(self.inner.select(index), self.skew)


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("skew", [0.0, 0.3])
def test_relaxed_refinement_is_decided_by_the_float64_residual(gen: torch.Generator, monkeypatch: pytest.MonkeyPatch,
                                                               skew: float, device: str) -> None:
    """After a bfloat16 presolve, the refinement makes one float32 product and the rest in bfloat16; the value
    is still within ``rtol`` of the float64 SVD and certified. With low-precision products of another map (a
    twin no rounding produces), the float64 residual misses the test, those inputs run again in float32, and
    the answer is as accurate: the coarse products cost time, never accuracy. On the CPU and on a GPU."""
    heads = make_heads(gen, "low-rank", d=16, H=3, k=4)
    X = randn(gen, 4, 24, 16)
    exact = exact_local_lipschitz(MultiHeadMap(heads), X)
    fn = MultiHeadMap(heads.to(device, torch.float32))
    to = AttentionLinearization.to
    monkeypatch.setattr(AttentionLinearization, "to", lambda self, dtype: _Skewed(to(self, dtype), skew))
    res = local_lipschitz(fn, X.to(device, torch.float32), presolve=torch.bfloat16, detailed=True)
    assert res.value.device.type == device
    assert bool(res.converged.all())
    assert float(((res.value.cpu().double() - exact).abs() / exact / res.error.cpu()).max()) <= 1
    assert float(res.error.max()) <= lipschitz.DEFAULT_RTOL
    if skew:
        assert bool((res.iterations > 1).all())      # every input ran again in float32
        assert bool((res.presolve_iterations > 0).all())
    else:
        assert bool((res.iterations == 1).all())     # one float32 product, the rest in bfloat16


def test_max_iter_caps_the_full_precision_products_of_a_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    """An input whose relaxed refinement misses its certificate runs again in full precision: ``max_iter`` caps its
    full-precision products, the refinement's first included (this problem's first input would take 8 more here)."""
    gen = torch.Generator().manual_seed(2)
    heads = make_heads(gen, "low-rank", d=16, H=3, k=4)
    X = randn(gen, 4, 24, 16).float()
    to = AttentionLinearization.to
    monkeypatch.setattr(AttentionLinearization, "to", lambda self, dtype: _Skewed(to(self, dtype), 0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        res = local_lipschitz(MultiHeadMap(heads.to(torch.float32)), X, presolve=torch.bfloat16, max_iter=8,
                              detailed=True)
    assert bool((res.iterations > 1).all()) and int(res.iterations.max()) <= 8, res.iterations


def test_relaxed_refinement_only_for_loose_targets(gen: torch.Generator) -> None:
    """The refinement is relaxed only where the float64 product certifies and the residual asked is at least
    ``RELAXED_RESIDUAL``: a tighter ``tol`` makes every refinement product in float32."""
    heads = make_heads(gen, "low-rank", d=16, H=3, k=4)
    X = randn(gen, 3, 24, 16)
    fn = MultiHeadMap(heads.to(torch.float32))
    loose = local_lipschitz(fn, X.float(), presolve=torch.bfloat16, tol=lipschitz.RELAXED_RESIDUAL, detailed=True)
    tight = local_lipschitz(fn, X.float(), presolve=torch.bfloat16, tol=lipschitz.RELAXED_RESIDUAL / 10,
                            detailed=True)
    assert bool((loose.iterations == 1).all()) and bool((tight.iterations > 1).all())
    assert bool(loose.converged.all()) and bool(tight.converged.all())


def test_presolve_choices(gen: torch.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """``"auto"`` presolves only closed-form float32 Lanczos on a device with native bfloat16; an explicit
    dtype on an autograd map and anything that is not a dtype are errors."""
    heads = make_heads(gen, "low-rank")
    X = 2 * randn(gen, 2, 6, 6)
    fn = MultiHeadMap(heads.to(torch.float32))
    for native in (True, False):
        monkeypatch.setattr(memory, "native_bfloat16", lambda device, native=native: native)
        res = local_lipschitz(fn, X.float(), detailed=True)
        assert bool((res.presolve_iterations > 0).all()) == native
        for other in (local_lipschitz(fn, X, detailed=True),                      # float64
                      local_lipschitz(fn, X.float(), method="power", detailed=True),
                      local_lipschitz(lambda Z: multihead_attention(Z, heads.to(torch.float32)), X.float(),
                                      detailed=True)):
            assert bool((other.presolve_iterations == 0).all())
    with pytest.raises(ValueError, match="casts its products"):
        local_lipschitz(lambda Z: multihead_attention(Z, heads), X, presolve=torch.bfloat16)
    for bad in ("bf16", torch.int8):
        with pytest.raises(ValueError, match="presolve must be"):
            local_lipschitz(fn, X, presolve=bad)


def test_native_bfloat16_reads_the_cpu_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CPU test looks for AVX512-BF16 or AMX in the flags; a missing /proc/cpuinfo means no."""
    import builtins

    real_open = builtins.open
    for flags, expected in (("fpu avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True),
                            ("fpu avx2 avx512f", False)):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda path, *a, info=info, **k: real_open(
            info if path == "/proc/cpuinfo" else path, *a, **k))
        assert memory.native_bfloat16(torch.device("cpu")) is expected
    monkeypatch.setattr(builtins, "open", lambda *a, **k: (_ for _ in ()).throw(OSError("no /proc")))
    assert memory.native_bfloat16(torch.device("cpu")) is False


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def test_non_convergence_is_still_reported(gen: torch.Generator) -> None:
    """Honesty on the fast path: two products are not enough, and the result says so."""
    fn = MultiHeadMap(make_heads(gen, "low-rank"))
    X = 3 * randn(gen, 3, 6, 6)
    res = local_lipschitz(fn, X, max_iter=2, detailed=True)
    assert not bool(res.converged.any())
    assert bool((res.iterations == 2).all())
    with pytest.warns(NotConvergedWarning):
        local_lipschitz(fn, X, max_iter=2)


@pytest.mark.parametrize("method", ["lanczos", "power"])
@pytest.mark.parametrize("fast", [True, False], ids=["closed-form", "autograd"])
def test_compaction_keeps_each_estimate(fast: bool, method: str) -> None:
    """Inputs converging at very different steps (radii 0.01 to 5) leave the batch as they finish; each
    estimate equals the one computed alone."""
    gen = torch.Generator().manual_seed(9)
    heads = make_heads(gen, "low-rank")
    fn = MultiHeadMap(heads) if fast else (lambda Z: multihead_attention(Z, heads))
    radii = torch.tensor([0.01, 5.0, 0.1, 2.0, 1.0, 0.5], dtype=F64).view(-1, 1, 1)
    X = radii * torch.nn.functional.normalize(randn(gen, 6, 5, 6), dim=-1)
    res = local_lipschitz(fn, X, method=method, tol=1e-6, max_iter=3000, detailed=True)
    assert len(set(res.iterations.tolist())) > 2          # the batch really shrank in several steps
    for i in range(len(X)):
        alone = local_lipschitz(fn, X[i:i + 1], method=method, tol=1e-6, max_iter=3000, detailed=True)
        torch.testing.assert_close(res.value[i:i + 1], alone.value, rtol=1e-9, atol=0)
    exact = exact_local_lipschitz(fn, X)
    assert float(((res.value - exact).abs() / exact).max()) <= 1e-8


class _CountingLinearization:
    """A closed-form linearization that records the batch size of every product; it declares its capabilities
    (:class:`lipnb.core.linearization.Linearized`): a cheap ``select``, no ``to``."""

    casts, shrinks = False, 1.0

    def __init__(self, inner: AttentionLinearization, log: list[int]) -> None:
        self.inner, self.log, self.output = inner, log, inner.output

    def jvp(self, E: Tensor) -> Tensor:
        self.log.append(len(E))
        return self.inner.jvp(E)

    def vjp(self, G: Tensor) -> Tensor:
        return self.inner.vjp(G)

    def select(self, index: Tensor) -> _CountingLinearization:
        return _CountingLinearization(self.inner.select(index), self.log)


def test_products_only_for_active_inputs(gen: torch.Generator) -> None:
    """A :class:`Linearizable` map with ``select``: every product is taken on the still-active inputs only,
    so the work is the sum of the iteration counts, not ``B`` times the largest."""
    heads = make_heads(gen, "low-rank")
    log: list[int] = []

    class Counting(MultiHeadMap):
        def linearize(self, X: Tensor) -> _CountingLinearization:
            return _CountingLinearization(super().linearize(X), log)

    radii = torch.tensor([0.01, 5.0, 0.1, 2.0], dtype=F64).view(-1, 1, 1)
    X = radii * torch.nn.functional.normalize(randn(gen, 4, 5, 6), dim=-1)
    res = local_lipschitz(Counting(heads), X, detailed=True)
    solve = log[: int(res.iterations.max())]        # then one more product for the left vectors
    assert sum(solve) == int(res.iterations.sum())
    assert solve == sorted(solve, reverse=True)


# --------------------------------------------------------------------------- memory: chunks and OOM


def test_chunks_from_the_memory_estimate_give_the_same_values(gen: torch.Generator,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory budget that fits two inputs splits the batch; values, iterations and vectors are unchanged."""
    heads = make_heads(gen, "low-rank")
    X = 2 * randn(gen, 5, 6, 6)
    block = ResidualAttentionMap(MultiHeadMap(heads), 1 + randn(gen, 6), randn(gen, 6), 1e-5, True)
    # the estimate of a composed linearization counts the attention's tensors inside it
    assert linearization_bytes(block, X[:1]) > linearization_bytes(MultiHeadMap(heads), X[:1])
    for fn in (MultiHeadMap(heads), lambda Z: multihead_attention(Z, heads), block):
        whole = local_lipschitz(fn, X, detailed=True)
        per_input = 3 * linearization_bytes(fn, X[:1]) + 72 * X[0].numel() * 8
        monkeypatch.setattr(memory, "memory_budget", lambda device, b=per_input: 2 * b + 1)
        assert lipschitz._chunk_sizes(fn, X, 72)[0] == 2
        parts = local_lipschitz(fn, X, detailed=True)
        monkeypatch.undo()
        torch.testing.assert_close(parts.value, whole.value, rtol=1e-12, atol=0)
        assert torch.equal(parts.iterations, whole.iterations)
        torch.testing.assert_close(parts.right_vector, whole.right_vector, rtol=1e-9, atol=1e-12)


def test_out_of_memory_halves_the_chunk(gen: torch.Generator) -> None:
    """An allocation failure for batches above 2 inputs is caught: the chunk is halved, the answer unchanged."""
    heads = make_heads(gen, "low-rank")
    sizes: list[int] = []

    def fragile(Z: Tensor) -> Tensor:
        sizes.append(len(Z))
        if len(Z) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return multihead_attention(Z, heads)

    X = 2 * randn(gen, 7, 4, 6)
    value = local_lipschitz(fragile, X)
    torch.testing.assert_close(value, local_lipschitz(MultiHeadMap(heads), X), rtol=1e-10, atol=0)
    assert max(sizes) > 2 and sizes[-1] <= 2


def test_other_errors_are_not_swallowed(gen: torch.Generator) -> None:
    """Only allocation failures trigger the retry; any other error reaches the caller."""
    def broken(Z: Tensor) -> Tensor:
        if len(Z) > 1:
            raise RuntimeError("shape mismatch")
        return Z * 2

    with pytest.raises(RuntimeError, match="shape mismatch"):
        local_lipschitz(broken, randn(gen, 3, 2, 2))


def test_generic_linearization_has_select(gen: torch.Generator) -> None:
    """The autograd :class:`Linearization` re-linearizes on a sub-batch when asked to ``select``."""
    heads = make_heads(gen, "no-bias")
    X = randn(gen, 3, 4, 6)
    lin = linearize(lambda Z: multihead_attention(Z, heads), X)
    assert isinstance(lin, Linearization) and lin.select is not None
    E = randn(gen, 2, 4, 6)
    torch.testing.assert_close(lin.select(torch.tensor([2, 0])).jvp(E),
                               MultiHeadMap(heads).linearize(X[[2, 0]]).jvp(E), rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- the Hugging Face modules


@pytest.fixture(scope="module")
def hf_models() -> dict[str, torch.nn.Module]:
    """The offline models, loaded once for this module (float32, eval mode)."""
    models = pytest.importorskip("lipnb.models")
    loaded = {}
    for name in ("minilm", "minilm-decoder", "gpt2-random"):
        try:
            loaded[name] = models.load(name)[0]
        except (ModuleNotFoundError, OSError) as error:  # pragma: no cover (offline package missing)
            pytest.skip(f"{name} unavailable: {error}")
    return loaded


def _module_products(fn: Callable[[Tensor], Tensor], X: Tensor, E: Tensor, G: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Output, ``J E`` and ``Jᵀ G`` of any map by torch.func."""
    Y, JE = torch.func.jvp(fn, (X,), (E,))
    _, pullback = torch.func.vjp(fn, X)
    return Y, JE, pullback(G)[0]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "layer"), [("minilm", 2), ("minilm-decoder", 4), ("gpt2-random", 6)])
def test_closed_form_equals_the_hf_self_attention_module(name: str, layer: int,
                                                         hf_models: dict[str, torch.nn.Module]) -> None:
    """The closed form stands for the real module: BERT's ``BertSelfAttention`` (``kind="self"``) is
    ``MultiHeadMap(concat_heads(head_matrices))`` (causal for the decoder), GPT-2's ``GPT2Attention`` is
    ``MultiHeadMap(head_matrices, masked=True)``; outputs, JVPs and VJPs agree in float64 to 1e-10."""
    from lipnb import models

    base = hf_models[name]
    model = copy.deepcopy(base).double()
    heads = models.head_matrices(model, layer)
    decoder = models.is_decoder(model)
    fast = MultiHeadMap(heads if name == "gpt2-random" else concat_heads(heads), masked=decoder)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(layer))
    X = models.attention_inputs(model, layer, ids, kind="self")
    gen = torch.Generator().manual_seed(0)
    E, G = randn(gen, *X.shape), randn(gen, *X.shape)
    for kind, candidate in (("self", fast), ("mha", MultiHeadMap(heads, masked=decoder))):
        Y, JE, JtG = _module_products(models.attention_map(model, layer, kind), X, E, G)
        lin = candidate.linearize(X)
        for ours, theirs in ((lin.output, Y), (lin.jvp(E), JE), (lin.vjp(G), JtG)):
            torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10 * float(theirs.abs().max()))
    # ... and the local Lipschitz constants of the float32 module and the float32 closed form agree.
    model32 = base
    heads32 = models.head_matrices(model32, layer)
    fast32 = MultiHeadMap(heads32 if name == "gpt2-random" else concat_heads(heads32), masked=decoder)
    X32 = X.float()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotConvergedWarning)
        ours = local_lipschitz(fast32, X32)
        theirs = local_lipschitz(models.attention_map(model32, layer, "self"), X32)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=0)


@pytest.mark.parametrize("rank", [3, 40, 64])
def test_sketched_factorization_is_exact(rank: int) -> None:
    """The randomized range finder behind :class:`MultiHeadMap` recovers ``A_h`` of rank ``r`` (``d = 64``):
    by a sketch when ``r`` is small, by the full SVD otherwise; ``K_hᵀ Q_h = A_h`` either way."""
    gen = torch.Generator().manual_seed(rank)
    H, d = 2, 64
    A = randn(gen, H, d, rank) @ randn(gen, H, rank, d) / d
    fn = MultiHeadMap(MultiHead(A, randn(gen, H, 4, d), randn(gen, H, d, 4)))
    F = fn._factors
    assert F.rank == rank
    rows = F.proj.view(H, 2 * rank + 4, d)
    Q, K = rows[:, :rank], rows[:, rank:2 * rank]
    torch.testing.assert_close(K.mT @ Q, A, rtol=0, atol=1e-12 * float(A.abs().max()))


@pytest.mark.parametrize("kind", ["low-rank", "bias-outside", "concat"])
def test_flop_formula_counts_every_matrix_product(kind: str, gen: torch.Generator) -> None:
    """The cost model ``MultiHeadMap.flops(n)`` equals torch's count of the matrix products actually run."""
    assert_flops_counted(MultiHeadMap(make_heads(gen, kind), masked=kind == "concat"), randn(gen, 1, 7, 6))


def test_fill_holes_moves_only_the_tail() -> None:
    """Batch compaction in place: kept rows stay put, except tail rows moved into the finished rows' places."""
    keep = torch.tensor([True, False, True, False, True, True])
    perm, holes, movers = krylov.fill_holes(keep)
    assert perm.tolist() == [0, 4, 2, 5] and holes.tolist() == [1, 3] and movers.tolist() == [4, 5]
    assert sorted(perm.tolist()) == torch.nonzero(keep).flatten().tolist()


# --------------------------------------------------------------------------- residual sub-layers (Sec. 2.3)


@given(n=st.integers(1, 5), d=st.integers(2, 7), eps=st.sampled_from([0.0, 1e-5, 1.0]), seed=st.integers(0, 2**16))
def test_layernorm_jacobian_is_autograds(n: int, d: int, eps: float, seed: int) -> None:
    """``LayerNormLinearization``: output, ``J E`` and ``Jᵀ G`` equal ``torch.func`` on ``layer_norm`` (float64)."""
    gen = torch.Generator().manual_seed(seed)
    X, E, G = randn(gen, 2, n, d), randn(gen, 2, n, d), randn(gen, 2, n, d)
    gamma, beta = randn(gen, d), randn(gen, d)
    lin = LayerNormLinearization.at(X, gamma, beta, eps)
    f = lambda Z: layer_norm(Z, gamma, beta, eps)  # noqa: E731
    Y, JE = torch.func.jvp(f, (X,), (E,))
    JtG = torch.func.vjp(f, X)[1](G)[0]
    for ours, theirs in ((lin.output, Y), (lin.jvp(E), JE), (lin.vjp(G), JtG)):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("post", [False, True])
@pytest.mark.parametrize("kind", ["low-rank", "no-bias"])
def test_residual_sublayer_has_the_dense_jacobian(gen: torch.Generator, kind: str, post: bool, masked: bool) -> None:
    """``ResidualAttentionMap`` (post-LN as BERT, pre-LN as GPT-2): its composed products build the dense
    float64 Jacobian of its own forward pass, and ``local_lipschitz`` through them is its exact norm."""
    heads = make_heads(gen, kind)
    fn = ResidualAttentionMap(MultiHeadMap(heads, masked=masked), 1 + randn(gen, 6), randn(gen, 6), 1e-5, post)
    X = 2 * randn(gen, 3, 5, 6)
    J = jacobian_matrix(fn, X)
    lin = fn.linearize(X)
    eye = torch.eye(30, dtype=F64).view(30, 1, 5, 6).expand(30, 3, 5, 6)
    columns = torch.stack([lin.jvp(e) for e in eye], -1).reshape(3, 30, 30)
    rows = torch.stack([lin.vjp(e).reshape(3, 30) for e in eye], 1)
    torch.testing.assert_close(lin.output, fn(X), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(columns, J, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(rows, J, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(local_lipschitz(fn, X, tol=1e-12), exact_local_lipschitz(fn, X), rtol=1e-9, atol=0)


def test_residual_sublayer_select_presolve_and_arguments(gen: torch.Generator) -> None:
    """``select`` keeps the chosen inputs, the bfloat16 presolve runs on the composed linearization without
    changing the float32 answer, and bad LayerNorm parameters are refused by name."""
    heads = make_heads(gen, "low-rank")
    fn = ResidualAttentionMap(MultiHeadMap(heads), 1 + randn(gen, 6), randn(gen, 6), 1e-5, True)
    X = randn(gen, 4, 5, 6)
    E = randn(gen, 2, 5, 6)
    index = torch.tensor([3, 1])
    torch.testing.assert_close(fn.linearize(X).select(index).vjp(E), fn.linearize(X[index]).vjp(E),
                               rtol=1e-12, atol=1e-12)
    X32 = X.float()
    plain = local_lipschitz(fn, X32, presolve=None, detailed=True)
    low = local_lipschitz(fn, X32, presolve=torch.bfloat16, detailed=True)
    assert bool((low.presolve_iterations > 0).all()) and bool(low.converged.all())
    torch.testing.assert_close(low.value, plain.value, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="gamma must be"):
        ResidualAttentionMap(MultiHeadMap(heads), randn(gen, 5), randn(gen, 6), 1e-5, True)
    with pytest.raises(ValueError, match="eps"):
        ResidualAttentionMap(MultiHeadMap(heads), randn(gen, 6), randn(gen, 6), -1.0, True)
