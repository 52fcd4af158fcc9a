"""Local Lipschitz constants of :mod:`lipnb.core.lipschitz` against dense float64 SVDs.

Lemma 3.1 (``Lip_X f = ||D_X f||_2``, top singular vector = direction of fastest change), App. E.1
(power iteration; Lanczos is the default), Lemma C.5 (weighted operator norm of Def C.4).
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import warnings
from collections.abc import Callable

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given
from torch import Tensor

from lipnb.core import memory
from lipnb.core.attention import MultiHead, attention_matrix, multihead_attention, self_attention
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix, weighted_operator_norm
from lipnb.core.jacobian import MultiHeadMap
from lipnb.core.krylov import normalize, norms
from lipnb.core.lipschitz import LipschitzResult, NotConvergedWarning, local_lipschitz

F64 = torch.float64
Map = Callable[[Tensor], Tensor]
RADII = (0.1, 1.0, 3.0, 10.0)
# The power iteration converges at the rate (σ₂/σ₁)², slow when the top two singular values are close:
# its default cap of 200 products suffices on the cases of test_matches_dense_svd, but not on
# near-degenerate ones (test_power_needs_more_iterations_on_close_singular_values; random attention
# inputs at radius 10 occasionally need more too). Tests that are not about the cap raise it to this.
POWER_MAX_ITER = 3000


def randn(gen: torch.Generator, *shape: int) -> Tensor:
    """Float64 standard normal tensor drawn from ``gen``."""
    return torch.randn(*shape, generator=gen, dtype=F64)


def at_radii(X: Tensor, radii: tuple[float, ...] = RADII) -> Tensor:
    """Copies of the batch ``X`` rescaled so that the largest token norm is each radius, stacked."""
    unit = X / X.norm(dim=-1).amax(-1).view(-1, 1, 1)
    return torch.cat([r * unit for r in radii])


def rel_err(estimate: Tensor, exact: Tensor) -> Tensor:
    """Relative error ``|estimate - exact| / exact`` in float64."""
    return (estimate.double() - exact).abs() / exact


Builder = Callable[..., Map]  # build(dtype, device="cpu") -> the map with its parameters there


def make_case(name: str, gen: torch.Generator) -> tuple[Builder, int]:
    """A random map ``(B, n, d) -> (B, n, d')`` for each tested kind, built in any dtype/device, and ``d``."""
    d = 4
    A, V = randn(gen, d, d) / 2, randn(gen, d, d) / 2
    if name in ("single", "masked", "weighted", "rect-V"):
        Vc = randn(gen, 2, d) if name == "rect-V" else V
        w = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=F64) if name == "weighted" else None

        def build(dtype: torch.dtype, device: str = "cpu") -> Map:
            A_, V_ = A.to(device, dtype), Vc.to(device, dtype)
            return lambda Z: self_attention(Z, A_, V_, masked=name == "masked", weights=w)

        return build, d
    if name == "score-bias":
        c = randn(gen, d)

        def build(dtype: torch.dtype, device: str = "cpu") -> Map:
            A_, V_, c_ = A.to(device, dtype), V.to(device, dtype), c.to(device, dtype)
            return lambda Z: attention_matrix(Z, A_, score_bias=c_) @ Z @ V_.mT

        return build, d
    H = 1 if name == "biased-head" else 2
    k = d // H
    heads = MultiHead.from_projections(
        randn(gen, H, k, d) / math.sqrt(d), randn(gen, H, k, d) / math.sqrt(d), randn(gen, H, k, d) / 2,
        randn(gen, H, d, k) / 2, q_bias=randn(gen, H, k), v_bias=randn(gen, H, k), o_bias=randn(gen, d))
    masked = name.endswith("-masked")
    if name.startswith("map"):  # closed-form Jacobian products (Linearizable), not autograd

        def build(dtype: torch.dtype, device: str = "cpu") -> Map:
            return MultiHeadMap(heads.to(device), masked=masked)

        return build, d

    def build(dtype: torch.dtype, device: str = "cpu") -> Map:
        h = heads.to(device, dtype)
        return lambda Z: multihead_attention(Z, h, masked=masked)

    return build, d


CASES = ["single", "rect-V", "masked", "weighted", "score-bias", "biased-head", "multihead", "multihead-masked",
         "map", "map-masked"]


@functools.cache
def case_data(case: str) -> tuple[Builder, Tensor, Tensor]:
    """The map of ``case``, a batch at every radius of ``RADII`` and its exact constants (computed once)."""
    gen = torch.Generator().manual_seed(CASES.index(case))
    build, d = make_case(case, gen)
    X = at_radii(randn(gen, 2, 4, d))
    return build, X, exact_local_lipschitz(build(F64), X)


# --------------------------------------------------------------------------- accuracy


@pytest.mark.parametrize("method", ["lanczos", "power"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", CASES)
def test_matches_dense_svd(case: str, dtype: torch.dtype, method: str) -> None:
    """Lemma 3.1 / App. E.1: relative error <= 1e-4 against the float64 SVD, radii 0.1 to 10.

    Default options (only ``method`` set); float32 inputs are compared with the float64 exact value.
    No input may fail to converge.
    """
    build, X, exact = case_data(case)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotConvergedWarning)
        estimate = local_lipschitz(build(dtype), X.to(dtype), method=method)
    assert estimate.dtype == dtype
    assert estimate.shape == (len(X),)
    assert float(rel_err(estimate, exact).max()) <= 1e-4


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_estimate_never_exceeds_the_norm(method: str) -> None:
    """App. E.1: Rayleigh-Ritz values of ``JᵀJ`` are at most ``||J||²``, even when stopped early."""
    build, X, exact = case_data("multihead")
    for max_iter in (1, 3, 10):
        res = local_lipschitz(build(F64), X, method=method, max_iter=max_iter, detailed=True)
        assert bool((res.value <= exact * (1 + 1e-12)).all())


def test_power_needs_more_iterations_on_close_singular_values(gen: torch.Generator) -> None:
    """App. E.1: with ``σ₂/σ₁ = 0.99`` the power iteration is not done in its default 200 products and says
    so (``NotConvergedWarning``, value still below the norm); with ``max_iter=3000`` it converges. Lanczos
    needs a handful of products."""
    M = torch.diag(torch.tensor([1.0, 0.99, 0.5], dtype=F64))
    X = randn(gen, 2, 3, 3)

    def fn(Z: Tensor) -> Tensor:
        return Z @ M.mT

    with pytest.warns(NotConvergedWarning):
        capped = local_lipschitz(fn, X, method="power", tol=1e-6)
    assert bool((capped <= 1).all())
    res = local_lipschitz(fn, X, method="power", tol=1e-6, max_iter=POWER_MAX_ITER, detailed=True)
    assert bool(res.converged.all())
    assert bool((res.iterations > 200).all())
    torch.testing.assert_close(res.value, torch.ones(2, dtype=F64), rtol=1e-9, atol=0)
    res = local_lipschitz(fn, X, tol=1e-6, detailed=True)
    assert bool(res.converged.all())
    assert bool((res.iterations <= 9).all())
    torch.testing.assert_close(res.value, torch.ones(2, dtype=F64), rtol=1e-12, atol=0)


def test_linear_map_has_its_operator_norm(gen: torch.Generator) -> None:
    """Lemma 3.1 on a linear map ``X -> X Mᵀ`` (rectangular): the constant is ``||I_n ⊗ M||₂ = ||M||₂``."""
    M = randn(gen, 3, 5)
    X = randn(gen, 2, 4, 5)
    for method in ("lanczos", "power"):
        value = local_lipschitz(lambda Z: Z @ M.mT, X, method=method, tol=1e-6, max_iter=1000)
        torch.testing.assert_close(value, torch.linalg.matrix_norm(M, ord=2).expand(2), rtol=1e-8, atol=0)


def test_constant_map_has_constant_zero(gen: torch.Generator) -> None:
    """Lemma 3.1: a map that ignores its input has ``Lip_X = 0``, reported as converged."""
    X = randn(gen, 3, 4, 2)
    for method in ("lanczos", "power"):
        res = local_lipschitz(lambda Z: torch.ones(Z.shape[0], 2, 2, dtype=F64), X, method=method,
                              detailed=True)
        assert bool((res.value == 0).all())
        assert bool(res.converged.all())


def test_bug_constant_map_with_parameters() -> None:
    """Regression (was a reported bug): a map that ignores ``X`` but whose output requires grad (through parameters)
    makes ``linearize`` raise ``RuntimeError: ... appears to not have been used in the graph`` instead of
    returning ``Lip_X = 0`` as it does for outputs that do not require grad (dense ground truth: 0)."""
    bias = torch.nn.Parameter(torch.ones(1, 3, 2, dtype=F64))
    X = torch.randn(2, 3, 2, dtype=F64)

    def fn(Z: Tensor) -> Tensor:
        return bias.expand(Z.shape[0], -1, -1) * 1.0

    assert bool((exact_local_lipschitz(fn, X) == 0).all())
    assert bool((local_lipschitz(fn, X) == 0).all())


# --------------------------------------------------------------------------- detailed results


@pytest.mark.parametrize("method", ["lanczos", "power"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_detailed_result_fields(method: str, dtype: torch.dtype) -> None:
    """``LipschitzResult``: shapes ``(B,)``, all converged, unit singular vectors with ``||J u|| = value``."""
    gen = torch.Generator().manual_seed(7)
    build, d = make_case("multihead", gen)
    X = at_radii(randn(gen, 1, 5, d), (0.5, 2.0, 5.0)).to(dtype)
    fn = build(dtype)
    res = local_lipschitz(fn, X, method=method, tol=1e-6, detailed=True, max_iter=POWER_MAX_ITER)
    assert isinstance(res, LipschitzResult)
    assert res.method == method
    B = X.shape[0]
    for field in (res.value, res.iterations, res.converged, res.residual):
        assert field.shape == (B,)
    assert res.value.dtype == dtype
    assert res.right_vector.shape == X.shape
    assert res.right_vector.dtype == dtype
    assert res.left_vector.shape == (B, 5, d)
    assert bool(res.converged.all())
    assert bool((res.residual <= 1e-6).all())
    assert bool(((res.iterations >= 1) & (res.iterations <= POWER_MAX_ITER)).all())
    tol = 1e-10 if dtype == F64 else 1e-5
    ones = torch.ones(B, dtype=F64)
    torch.testing.assert_close(res.right_vector.flatten(1).norm(dim=1).double(), ones, rtol=tol, atol=0)
    torch.testing.assert_close(res.left_vector.flatten(1).norm(dim=1).double(), ones, rtol=tol, atol=0)
    # Singular pair, checked in float64 with torch.func: ||J u|| = value, J u = value v, Jᵀ v = value u
    # and JᵀJ u = value² u, to the solver's tolerance (tol = 1e-6 on the relative residual; float32
    # rounding of u adds about 1e-7).
    f64, X64 = build(F64), X.double()
    u, v = res.right_vector.double(), res.left_vector.double()
    _, Ju = torch.func.jvp(f64, (X64,), (u,))
    _, vjp = torch.func.vjp(f64, X64)
    (Jtv,) = vjp(v)
    (JtJu,) = vjp(Ju)
    exact = exact_local_lipschitz(f64, X64)
    assert float(rel_err(Ju.flatten(1).norm(dim=1), exact).max()) <= 1e-4
    assert float(rel_err(res.value, exact).max()) <= 1e-4
    value = res.value.double().view(-1, 1, 1)

    def worst(residual: Tensor, scale: Tensor) -> float:
        return float((residual.flatten(1).norm(dim=1) / scale.flatten()).max())

    assert worst(Ju - value * v, value) <= 1e-5
    assert worst(Jtv - value * u, value) <= 2e-6
    assert worst(JtJu - value**2 * u, value**2) <= 2e-6


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_tiny_max_iter_is_reported(method: str) -> None:
    """App. E.1: stopping before convergence is never silent: ``converged`` False / ``NotConvergedWarning``."""
    gen = torch.Generator().manual_seed(3)
    build, d = make_case("multihead", gen)
    X = at_radii(randn(gen, 2, 5, d), (1.0, 10.0))
    res = local_lipschitz(build(F64), X, method=method, max_iter=2, detailed=True)
    assert not bool(res.converged.any())
    assert bool((res.iterations == 2).all())
    assert bool((res.residual > 1e-6).all())
    with pytest.warns(NotConvergedWarning, match="did not converge"):
        local_lipschitz(build(F64), X, method=method, max_iter=2)


def test_converged_inputs_do_not_warn(gen: torch.Generator) -> None:
    """App. E.1: a converged batch returns plain values with no warning."""
    build, d = make_case("single", gen)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = local_lipschitz(build(F64), randn(gen, 2, 3, d))
    assert isinstance(value, Tensor)


@pytest.mark.parametrize("case", ["single", "masked", "biased-head"])
def test_top_singular_vector_is_direction_of_fastest_change(case: str) -> None:
    """Lemma 3.1 (THEORY.md): ``||f(X + ηU) - f(X)|| / η -> Lip_X f`` as ``η -> 0``, error O(η)."""
    gen = torch.Generator().manual_seed(11)
    build, d = make_case(case, gen)
    fn = build(F64)
    X = at_radii(randn(gen, 1, 4, d), (2.0,))
    res = local_lipschitz(fn, X, detailed=True)
    U, value = res.right_vector, float(res.value[0])
    errors = []
    for eta in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6):
        ratio = float((fn(X + eta * U) - fn(X)).norm() / eta)
        errors.append(abs(ratio - value) / value)
    # First order in η: each tenfold smaller step gives about a tenfold smaller error.
    assert all(later < 0.2 * earlier for earlier, later in itertools.pairwise(errors))
    assert errors[-1] < 1e-6
    # A random unit direction changes f strictly more slowly.
    R = torch.randn(X.shape, generator=gen, dtype=F64)
    R = R / R.norm()
    assert float((fn(X + 1e-6 * R) - fn(X)).norm() / 1e-6) < value


# --------------------------------------------------------------------------- any map, batches


def test_arbitrary_lambda_matches_dense(gen: torch.Generator) -> None:
    """Lemma 3.1 for any ``(B, n, d) -> (B, n', d')`` map, here with ``n' != n`` and ``d' != d``."""
    M = randn(gen, 3, 2)

    def fn(Z: Tensor) -> Tensor:
        return torch.tanh(Z.cumsum(1)[:, 1:] @ M.mT) * Z.square().sum((1, 2)).view(-1, 1, 1)

    X = randn(gen, 3, 4, 2)
    exact = exact_local_lipschitz(fn, X)
    assert float(rel_err(local_lipschitz(fn, X), exact).max()) <= 1e-4
    assert float(rel_err(local_lipschitz(fn, X, method="power", max_iter=POWER_MAX_ITER), exact).max()) <= 1e-4


class _SelfAttention(torch.nn.Module):
    """``nn.MultiheadAttention`` as a map ``(B, n, d) -> (B, n, d)``: self-attention ``(X, X, X)``.

    With ``need_weights=True`` torch computes the softmax explicitly; with ``False`` it calls the fused
    ``scaled_dot_product_attention`` kernel (as Hugging Face models with ``attn_implementation="sdpa"`` do).
    """

    def __init__(self, mha: torch.nn.MultiheadAttention, need_weights: bool) -> None:
        super().__init__()
        self.mha = mha
        self.need_weights = need_weights

    def forward(self, X: Tensor) -> Tensor:
        return self.mha(X, X, X, need_weights=self.need_weights)[0]


def _module_check(dtype: torch.dtype, need_weights: bool) -> None:
    torch.manual_seed(0)
    module = _SelfAttention(torch.nn.MultiheadAttention(4, 2, bias=True, batch_first=True), need_weights).eval()
    gen = torch.Generator().manual_seed(5)
    X = at_radii(randn(gen, 1, 5, 4), (0.1, 1.0, 10.0))
    exact = exact_local_lipschitz(copy.deepcopy(module).double(), X)
    estimate = local_lipschitz(module.to(dtype), X.to(dtype))
    assert estimate.dtype == dtype
    assert float(rel_err(estimate, exact).max()) <= 1e-4


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_torch_module_matches_dense(dtype: torch.dtype) -> None:
    """Lemma 3.1 for an ``nn.Module`` (``nn.MultiheadAttention`` with biases), float32 against float64 SVD."""
    _module_check(dtype, need_weights=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_bug_fused_sdpa_module(dtype: torch.dtype) -> None:
    """Regression (was a reported bug): ``linearize`` gets its JVPs by double backward, which the fused CPU
    ``scaled_dot_product_attention`` kernel lacks (nor has it forward-mode AD), so ``local_lipschitz``
    raises ``RuntimeError: derivative for aten::_scaled_dot_product_flash_attention_for_cpu_backward
    is not implemented`` on ``nn.MultiheadAttention(need_weights=False)``; the forward-mode dense ground truth
    (`jacobian_matrix`) needs the math kernel too."""
    _module_check(dtype, need_weights=False)


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_batch_elements_are_independent(method: str) -> None:
    """The batched estimate of ``X[i]`` equals the estimate of ``X[i:i+1]`` alone (to the solver tolerance)."""
    gen = torch.Generator().manual_seed(2)
    build, d = make_case("multihead-masked", gen)
    fn = build(F64)
    X = at_radii(randn(gen, 1, 4, d), (0.3, 3.0, 8.0))
    batch = local_lipschitz(fn, X, method=method, tol=1e-6, max_iter=POWER_MAX_ITER)
    alone = torch.cat([local_lipschitz(fn, X[i:i + 1], method=method, tol=1e-6, max_iter=POWER_MAX_ITER)
                       for i in range(len(X))])
    torch.testing.assert_close(batch, alone, rtol=1e-8, atol=0)
    # Changing the other batch elements does not change entry 0.
    other = torch.cat([X[:1], 5 * randn(gen, len(X) - 1, 4, d)])
    moved = local_lipschitz(fn, other, method=method, tol=1e-6, max_iter=POWER_MAX_ITER)
    torch.testing.assert_close(moved[0], batch[0], rtol=1e-8, atol=0)


def test_dtype_option_casts_input(gen: torch.Generator) -> None:
    """``dtype=``: the estimate is computed and returned in the requested dtype."""
    build, d = make_case("single", gen)
    X = randn(gen, 2, 3, d)
    value = local_lipschitz(build(F64), X.float(), dtype=F64, tol=1e-6)
    assert value.dtype == F64
    torch.testing.assert_close(value, exact_local_lipschitz(build(F64), X.float()), rtol=1e-8, atol=0)


def test_float32_norms_are_summed_accurately() -> None:
    """pytorch/pytorch#169237: float32 ``vector_norm`` on CPU drifts by ~1e-5 on long vectors with a few
    large entries (Lanczos vectors at n d ~ 2e5); the solver's norms stay at rounding level."""
    v = torch.randn(3, 512 * 384, generator=torch.Generator().manual_seed(0))
    v[:, : v.shape[1] // 100] *= 100
    exact = v.double().norm(dim=1)
    assert float(((norms(v).double() - exact).abs() / exact).max()) <= 1e-6
    assert float(((normalize(v).double().norm(dim=1)) - 1).abs().max()) <= 1e-6


def test_float32_estimate_of_a_spiky_diagonal_map_at_rounding_level() -> None:
    """A diagonal map with 1% of large entries (``||J|| = 100``) on a 512 x 384 input: the float32
    Lanczos estimate is exact to 1e-6 (a drifting vector norm biases it by ~1e-5)."""
    D = torch.ones(1, 512, 384)
    D.view(-1)[torch.randperm(D.numel(), generator=torch.Generator().manual_seed(1))[: D.numel() // 100]] = 100.0
    value = local_lipschitz(lambda Z: Z * D, torch.randn(2, 512, 384))
    assert float((value.double() / 100 - 1).abs().max()) <= 1e-6


def test_jacobian_matrix_shape_and_columns(gen: torch.Generator) -> None:
    """Dense ground truth: ``jacobian_matrix`` is ``(B, n' d', n d)`` and its columns are JVPs."""
    build, d = make_case("rect-V", gen)
    fn = build(F64)
    X = randn(gen, 2, 3, d)
    J = jacobian_matrix(fn, X)
    assert J.shape == (2, 3 * 2, 3 * d)
    E = randn(gen, 2, 3, d)
    _, JE = torch.func.jvp(fn, (X,), (E,))
    torch.testing.assert_close(torch.einsum("bij,bj->bi", J, E.flatten(1)), JE.flatten(1))


@pytest.mark.parametrize("case", CASES)
def test_jacobian_matrix_equals_reverse_mode(case: str) -> None:
    """Ground truth, checked against an independent computation: the forward-mode ``jacobian_matrix``
    equals reverse-mode ``torch.autograd.functional.jacobian`` of each element on its own."""
    build, X, _ = case_data(case)
    fn = build(F64)
    J = jacobian_matrix(fn, X)
    for b in range(len(X)):
        reverse = torch.autograd.functional.jacobian(lambda z: fn(z.unsqueeze(0))[0], X[b])
        torch.testing.assert_close(J[b], reverse.reshape(J.shape[1], -1), rtol=1e-12, atol=1e-12)


def test_jacobian_matrix_with_per_batch_data_and_small_memory(gen: torch.Generator,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A map closing over per-batch weights ``(B, n)`` is differentiated at the whole batch; a memory
    budget that fits one direction at a time gives the same matrix."""
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    X = randn(gen, 2, 4, 3)
    w = torch.rand(2, 4, generator=gen, dtype=F64) + 0.1

    def fn(Z: Tensor) -> Tensor:
        return self_attention(Z, A, V, weights=w)

    J = jacobian_matrix(fn, X)
    for b in range(2):
        reverse = torch.autograd.functional.jacobian(
            lambda z, b=b: self_attention(z.unsqueeze(0), A, V, weights=w[b])[0], X[b])
        torch.testing.assert_close(J[b], reverse.reshape(12, 12), rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(memory, "memory_budget", lambda device: 1)
    torch.testing.assert_close(jacobian_matrix(fn, X), J, rtol=0, atol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_cuda_follows_input(dtype: torch.dtype) -> None:
    """Device and dtype follow the input: a CUDA batch gives CUDA values matching the CPU SVD."""
    gen = torch.Generator().manual_seed(4)
    build, d = make_case("multihead", gen)
    X = at_radii(randn(gen, 2, 4, d))
    exact = exact_local_lipschitz(build(F64), X)
    res = local_lipschitz(build(dtype, "cuda"), X.to("cuda", dtype), detailed=True)
    assert res.value.device.type == "cuda"
    assert res.value.dtype == dtype
    assert res.right_vector.device.type == "cuda"
    assert float(rel_err(res.value.cpu(), exact).max()) <= 1e-4


# --------------------------------------------------------------------------- Lemma C.5 (weighted norm)


def _repeat(X: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """The sequence with token ``i`` repeated ``m_i`` times, and the duplication matrix ``E`` ``(N d, n d)``."""
    n, d = X.shape[1:]
    idx = torch.repeat_interleave(torch.arange(n), m)
    E = torch.zeros(len(idx) * d, n * d, dtype=F64)
    for a, i in enumerate(idx.tolist()):
        E[a * d:(a + 1) * d, i * d:(i + 1) * d] = torch.eye(d, dtype=F64)
    return X[:, idx], E


@given(seed=st.integers(0, 2**31 - 1), m=st.lists(st.integers(1, 3), min_size=2, max_size=4),
       scale=st.floats(0.1, 2.0))
def test_weighted_attention_is_attention_on_repeated_tokens(seed: int, m: list[int], scale: float) -> None:
    """Def C.4 with ``w_i = m_i / sum m``: ``f_w(X)_i`` is plain attention's output at every copy of ``x_i``."""
    gen = torch.Generator().manual_seed(seed)
    d = 2
    X = scale * randn(gen, 1, len(m), d)
    A, V = randn(gen, d, d), randn(gen, d, d)
    counts = torch.tensor(m)
    Y, _ = _repeat(X, counts)
    fw = self_attention(X, A, V, weights=counts.double())
    idx = torch.repeat_interleave(torch.arange(len(m)), counts)
    torch.testing.assert_close(self_attention(Y, A, V), fw[:, idx], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_weighted_operator_norm_is_the_joint_perturbation_norm(seed: int) -> None:
    """Lemma C.5: ``||W^{1/2} D f_w W^{-1/2}||`` is the norm of ``D g`` (``g`` = plain attention on the
    repeated sequence ``Y``) restricted to perturbations moving all copies of a token together.

    Independent perturbations of the copies see more: ``D_Y g`` is block diagonal for the split
    "copies move together" ⊕ "copies' perturbations sum to zero"; on the second part the mean and
    spread terms of Lemma C.2 cancel and only ``ε_a -> V Cov_i A ε_a`` is left, so

        ``Lip_Y(g) = max(weighted_operator_norm, max_{i : m_i >= 2} ||V Cov_i A||₂) >= weighted_operator_norm``.
    """
    gen = torch.Generator().manual_seed(seed)
    n, d = 3, 2
    A, V = randn(gen, d, d), randn(gen, d, d)
    X = randn(gen, 1, n, d)
    m = torch.randint(1, 4, (n,), generator=gen)
    w = m.double() / m.sum()
    weighted = weighted_operator_norm(lambda Z: self_attention(Z, A, V, weights=w), X, w)

    def g(Z: Tensor) -> Tensor:
        return self_attention(Z, A, V)

    Y, E = _repeat(X, m)
    J = jacobian_matrix(g, Y)[0]
    basis, _ = torch.linalg.qr(E)  # orthonormal basis of the "copies move together" subspace
    torch.testing.assert_close(weighted[0], torch.linalg.matrix_norm(J @ basis, ord=2), rtol=1e-10, atol=0)
    # D_Y g leaves both subspaces invariant (block diagonal).
    joint = basis @ basis.mT
    apart = torch.eye(len(joint), dtype=F64) - joint
    assert float(torch.linalg.matrix_norm(apart @ J @ joint, ord=2)) < 1e-12 * float(weighted[0])
    assert float(torch.linalg.matrix_norm(joint @ J @ apart, ord=2)) < 1e-12 * float(weighted[0])
    # The closed form of the full constant on the repeated sequence.
    P = attention_matrix(X, A, weights=w)[0]
    xbar = P @ X[0]
    local = [
        torch.linalg.matrix_norm(V @ torch.einsum("j,jk,jl->kl", P[i], X[0] - xbar[i], X[0] - xbar[i]) @ A, ord=2)
        for i in range(n) if m[i] >= 2
    ]
    full = torch.stack([weighted[0], *local]).max()
    torch.testing.assert_close(exact_local_lipschitz(g, Y)[0], full, rtol=1e-10, atol=0)
    assert float(exact_local_lipschitz(g, Y)[0]) >= float(weighted[0]) * (1 - 1e-12)


def test_repeating_every_token_changes_the_euclidean_constant() -> None:
    """Lemma C.5: equality with the unweighted constant on the repeated sequence fails in general.

    Doubling every token leaves the empirical measure, the weights (uniform) and hence the weighted
    norm unchanged, yet the Euclidean local constant on the doubled sequence is about 19% larger: there
    the perturbations that move two copies apart see ``||V Cov_i A||₂`` (seeded case, found by search).
    """
    gen = torch.Generator().manual_seed(156)
    A, V, X = randn(gen, 2, 2), randn(gen, 2, 2), 2 * randn(gen, 1, 3, 2)
    w = torch.full((3,), 1 / 3, dtype=F64)
    weighted = weighted_operator_norm(lambda Z: self_attention(Z, A, V, weights=w), X, w)
    plain = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X)
    torch.testing.assert_close(weighted, plain)
    Y, _ = _repeat(X, torch.tensor([2, 2, 2]))
    doubled = exact_local_lipschitz(lambda Z: self_attention(Z, A, V), Y)
    assert float(doubled[0]) > 1.15 * float(weighted[0])


def test_weighted_operator_norm_uniform_weights(gen: torch.Generator) -> None:
    """Lemma C.5 with ``w = 1/n``: ``W^{1/2} D W^{-1/2} = D``, the plain local constant."""
    A, V = randn(gen, 3, 3), randn(gen, 3, 3)
    X = randn(gen, 2, 4, 3)
    w = torch.full((4,), 0.25, dtype=F64)
    torch.testing.assert_close(
        weighted_operator_norm(lambda Z: self_attention(Z, A, V, weights=w), X, w),
        exact_local_lipschitz(lambda Z: self_attention(Z, A, V), X))


def test_weighted_operator_norm_closed_form(gen: torch.Generator) -> None:
    """Lemma C.5: equals ``||W^{1/2} J W^{-1/2}||₂`` built by hand (unnormalised weights accepted)."""
    n, d = 3, 2
    A, V = randn(gen, d, d), randn(gen, d, d)
    X = randn(gen, 1, n, d)
    w = torch.tensor([1.0, 2.0, 5.0], dtype=F64)

    def fw(Z: Tensor) -> Tensor:
        return self_attention(Z, A, V, weights=w)

    J = jacobian_matrix(fw, X)[0]
    root = (w / w.sum()).sqrt().repeat_interleave(d)
    expected = torch.linalg.matrix_norm(torch.diag(root) @ J @ torch.diag(1 / root), ord=2)
    torch.testing.assert_close(weighted_operator_norm(fw, X, w)[0], expected, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- bad input


def _sa(Z: Tensor) -> Tensor:
    A = torch.eye(Z.shape[-1], dtype=Z.dtype)
    return self_attention(Z, A, A)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X: local_lipschitz(_sa, X, method="svd"), "method must be 'lanczos' or 'power'"),
        (lambda X: local_lipschitz(_sa, X * float("nan")), "NaN or inf"),
        (lambda X: local_lipschitz(_sa, X[0]), "shape \\(batch, n, d\\)"),
        (lambda X: local_lipschitz(_sa, X[:, :0]), "n = 0"),
        (lambda X: local_lipschitz(lambda Z: _sa(Z).flatten(1), X), "fn must map"),
        (lambda X: local_lipschitz(lambda Z: _sa(Z)[:1], X), "fn must map"),
        (lambda X: local_lipschitz(lambda Z: (_sa(Z),), X), "fn must map"),
        (lambda X: local_lipschitz(_sa, X, tol=0.0), "must lie in \\(0, 1\\]"),
        (lambda X: local_lipschitz(_sa, X, max_iter=0), "max_iter must be >= 1"),
        (lambda X: exact_local_lipschitz(_sa, X * float("inf")), "NaN or inf"),
        (lambda X: jacobian_matrix(_sa, X[0]), "shape \\(batch, n, d\\)"),
        (lambda X: weighted_operator_norm(_sa, X, -torch.ones(3)), "positive"),
    ],
    ids=["method", "X-nan", "X-rank", "n-zero", "fn-2d", "fn-batch", "fn-tuple", "tol", "max-iter",
         "exact-X-inf", "jacobian-rank", "weights-negative"],
)
def test_bad_input_raises_value_error(call: Callable[[Tensor], object], message: str) -> None:
    """Input validation: each bad input raises ``ValueError`` whose message names the problem."""
    X = torch.randn(2, 3, 2, dtype=F64)
    with pytest.raises(ValueError, match=message):
        call(X)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda X: weighted_operator_norm(_sa, X, torch.ones(4)), "weights must have shape"),
        (lambda X: weighted_operator_norm(_sa, X, torch.tensor([1.0, float("nan"), 1.0])), "finite"),
        (lambda X: exact_local_lipschitz(lambda Z: _sa(Z)[:1], X), "fn must map"),
    ],
    ids=["weights-shape", "weights-nan", "exact-fn-batch"],
)
def test_bug_weighted_norm_and_dense_jacobian_validation(call: Callable[[Tensor], object], message: str) -> None:
    """``weighted_operator_norm`` rejects weights of the wrong shape or with NaN, and ``jacobian_matrix`` an
    ``fn`` whose output batch differs from its input batch, as ``local_lipschitz`` does."""
    X = torch.randn(2, 3, 2, dtype=F64)
    with pytest.raises(ValueError, match=message):
        call(X)


@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6), d=st.integers(1, 4), scale=st.floats(0.1, 3.0),
       method=st.sampled_from(["lanczos", "power"]))
def test_every_converged_estimate_is_the_dense_constant(seed: int, n: int, d: int, scale: float, method: str) -> None:
    """For any small attention problem: an input flagged converged carries the dense float64 constant to
    the accuracy its residual promises (relative error of θ about tol, of the norm about tol / 2), and
    never exceeds it beyond rounding (θ is a Rayleigh quotient)."""
    gen = torch.Generator().manual_seed(seed)
    X = scale * randn(gen, 2, n, d)
    A, V = randn(gen, d, d), randn(gen, d, d)
    f = functools.partial(self_attention, A=A, V=V)
    result = local_lipschitz(f, X, method=method, tol=1e-10, max_iter=500, detailed=True)
    exact = exact_local_lipschitz(f, X)
    assert bool((result.value <= exact * (1 + 1e-10)).all())
    ok = result.converged
    torch.testing.assert_close(result.value[ok], exact[ok], rtol=1e-6, atol=1e-12)


# --------------------------------------------------------------------------- rtol: the accuracy of the value


def _map_problem(seed: int, B: int = 6, n: int = 6, d: int = 8, H: int = 2, scale: float = 1.5) -> tuple[Map, Tensor]:
    """A closed-form multi-head map with biases and a batch of inputs of comparable scale."""
    gen = torch.Generator().manual_seed(seed)
    k = d // H
    heads = MultiHead.from_projections(
        randn(gen, H, k, d) / math.sqrt(d), randn(gen, H, k, d) / math.sqrt(d), randn(gen, H, k, d) / 2,
        randn(gen, H, d, k) / 2, q_bias=randn(gen, H, k), v_bias=randn(gen, H, k), o_bias=randn(gen, d))
    return MultiHeadMap(heads), scale * randn(gen, B, n, d)


@pytest.mark.parametrize(("rtol", "dtype"),
                         [(1e-3, torch.float32), (1e-5, torch.float32), (1e-3, torch.float64), (1e-7, torch.float64)],
                         ids=["1e-3-f32", "1e-5-f32", "1e-3-f64", "1e-7-f64"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rtol_delivers_the_accuracy_asked(seed: int, rtol: float, dtype: torch.dtype) -> None:
    """``rtol``: every converged value is within its certified ``error`` of the dense float64 top singular
    value, and that certificate within ``rtol``: the accuracy delivered is at most the accuracy asked (the
    premise, that the top eigenvalue was not missed, holds on these problems: checked by the dense truth)."""
    f, X = _map_problem(seed)
    exact = exact_local_lipschitz(f, X)
    result = local_lipschitz(f, X.to(dtype), rtol=rtol, presolve=None, detailed=True)
    assert bool(result.converged.all())
    error = rel_err(result.value, exact)
    assert bool((error <= result.error).all()), (error, result.error)
    assert bool((result.error <= rtol).all())


def test_rtol_batched_equals_one_at_a_time() -> None:
    """Each input stops on its own test: a batch gives every input what it gets alone, within the asked
    1e-5; input 0 (the same starting vector alone and in the batch) takes the same number of products."""
    f, X = _map_problem(4)
    together = local_lipschitz(f, X, rtol=1e-5, detailed=True)
    alone = torch.cat([local_lipschitz(f, X[b:b + 1], rtol=1e-5, detailed=True).value for b in range(len(X))])
    torch.testing.assert_close(together.value, alone, rtol=2e-5, atol=0)
    alone_first = local_lipschitz(f, X[:1], rtol=1e-5, detailed=True)
    assert int(together.iterations[0]) == int(alone_first.iterations[0])


def test_rtol_keeps_non_convergence_honest() -> None:
    """An input that cannot meet ``rtol`` within ``max_iter`` is flagged (and warned about), with an
    ``error`` above ``rtol``: the rule never reports a certificate it does not have."""
    f, X = _map_problem(5)
    result = local_lipschitz(f, X, rtol=1e-12, max_iter=2, presolve=None, detailed=True)
    assert not bool(result.converged.any()) and bool((result.error > 1e-12).all())
    with pytest.warns(NotConvergedWarning, match="rtol=1e-12"):
        local_lipschitz(f, X, rtol=1e-12, max_iter=2, presolve=None)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rtol": 0.0}, ValueError, "rtol is a relative error"),
        ({"rtol": 1.0}, ValueError, "rtol is a relative error"),
        ({"rtol": -1e-4}, ValueError, "rtol is a relative error"),
        ({"rtol": "1e-4"}, TypeError, "rtol must be a real number"),
        ({"rtol": True}, TypeError, "rtol must be a real number"),
        ({"start": "warm"}, ValueError, "start must be 'random'"),
        ({"start": "shared"}, ValueError, "lower singular value"),
        ({"tol": 1e-6, "rtol": 1e-4}, ValueError, "not both"),
        ({"confidence": 1.0}, ValueError, "confidence is a failure probability"),
        ({"confidence": "0.1"}, TypeError, "confidence must be a real number"),
    ],
    ids=["zero", "one", "negative", "string", "bool", "start", "shared", "both", "confidence-one", "confidence-str"],
)
def test_rtol_and_start_refusals(kwargs: dict, error: type, message: str) -> None:
    """Bad ``rtol`` (not a real in (0, 1)) or ``start`` values are refused with the argument named."""
    with pytest.raises(error, match=message):
        local_lipschitz(_sa, torch.randn(2, 3, 2, dtype=F64), **kwargs)
