"""What ``local_lipschitz``'s certificate promises, against dense float64 truth on the hard cases: clustered top
singular values, saturated attention, float32, tiny and huge Jacobians, maps that are not what they seem."""

from __future__ import annotations

import math
import resource

import pytest
import torch
from conftest import CUDA, prescribed_jacobians
from torch import Tensor

from lipnb.core import lipschitz
from lipnb.core.attention import MultiHead, self_attention
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix
from lipnb.core.jacobian import MultiHeadMap
from lipnb.core.krylov import KW_LANCZOS, KW_POWER, failure_epsilon
from lipnb.core.linearization import linearization_bytes
from lipnb.core.lipschitz import NotConvergedWarning, local_lipschitz

F64 = torch.float64


def spectrum_map(values: list[list[float]], n: int = 4, d: int = 5, seed: int = 0) -> tuple[object, Tensor]:
    """A linear map per input, ``x_b -> J_b x_b`` with ``J_b = U diag(values[b]) Vᵀ`` (``(n d) x (n d)``)."""
    g = torch.Generator().manual_seed(seed)
    J = prescribed_jacobians(values, n, d, g)

    def fn(Z: Tensor) -> Tensor:
        return torch.einsum("bij,bj->bi", J[: len(Z)].to(Z.dtype), Z.flatten(1)).view(len(Z), n, d)

    return fn, torch.randn(len(values), n, d, generator=g, dtype=F64)


def nearest_and_top(fn: object, X: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """Relative distances ``|σ - value| / value`` to the nearest singular value and to the largest (dense)."""
    sv = torch.linalg.svdvals(jacobian_matrix(fn, X))
    v = value.double().view(-1, 1)
    near = ((sv - v).abs() / v).min(1).values
    return near, (sv[:, 0] - value.double()).abs() / value.double()


# --------------------------------------------------------------------------- error: a bound, and of what


@pytest.mark.parametrize("gap", [1e-2, 1e-4, 1e-6, 1e-8])
@pytest.mark.parametrize("dtype", [F64, torch.float32], ids=["f64", "f32"])
def test_error_bounds_the_nearest_singular_value_in_a_cluster(gap: float, dtype: torch.dtype) -> None:
    """Top singular values ``1, 1 - gap, 1 - 2 gap``: for 12 random starts ``error`` always bounds the distance
    to the nearest singular value; wherever that one is the top (the premise), it bounds the true error; a
    missed top is off by at most the cluster's width (and the Kato-Temple certificate was off by 1e2-1e7 here)."""
    values = [[1.0, 1 - gap, 1 - 2 * gap, 0.5, 0.2]] * 3
    fn, X = spectrum_map(values)
    for seed in range(4):
        res = local_lipschitz(fn, X.to(dtype), seed=seed, detailed=True)
        near, top = nearest_and_top(fn, X, res.value)
        slack = 0 if dtype == F64 else 1e-6          # float32 rounding of the returned value itself
        assert bool((near <= res.error + slack).all()), (near, res.error)
        premise = near == top
        assert bool((top[premise] <= res.error[premise] + slack).all())
        assert bool((top <= 2 * gap + res.error + slack).all())
        assert bool((res.error[res.converged] <= 1e-4).all())


@pytest.mark.parametrize("scale", [3.0, 6.0, 10.0])
@pytest.mark.parametrize("rtol", [1e-4, 1e-8])
def test_saturated_attention_float64_meets_rtol(scale: float, rtol: float) -> None:
    """Saturated self-attention (scores of order ``scale²``), small problems where ``rtol=1e-4`` used to miss by
    47x and ``rtol=1e-8`` by 6000x: every value within its ``error`` of the nearest singular value, within ``rtol``
    of the top one wherever that is the nearest."""
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        n, d = 3 + seed % 3, 2 + seed % 2
        A, V = torch.randn(d, d, generator=g, dtype=F64), torch.randn(d, d, generator=g, dtype=F64)

        def fn(Z: Tensor, A: Tensor = A, V: Tensor = V) -> Tensor:
            return self_attention(Z, A, V)

        X = scale * torch.randn(4, n, d, generator=g, dtype=F64)
        res = local_lipschitz(fn, X, rtol=rtol, max_iter=n * d, detailed=True)
        near, top = nearest_and_top(fn, X, res.value)
        assert bool((near <= res.error + 1e-13).all())           # 1e-13: the dense SVD's own rounding
        premise = near == top
        assert bool((top[premise & res.converged] <= rtol).all()), (top, res.error)


def _attention_problem(seed: int, scale: float, B: int = 3, n: int = 6, d: int = 8) -> tuple[MultiHeadMap, Tensor]:
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(2, d, d, generator=g, dtype=F64) / math.sqrt(d)
    V = torch.randn(2, 4, d, generator=g, dtype=F64) / math.sqrt(d)
    W = torch.randn(2, d, 4, generator=g, dtype=F64) / 2
    return MultiHeadMap(MultiHead(A, V, W)), scale * torch.randn(B, n, d, generator=g, dtype=F64)


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("scale", [10.0, 30.0, 100.0])
def test_float32_error_bounds_float64_truth_on_saturated_attention(scale: float, device: str) -> None:
    """float32 runs at input scales 10-100 (float32 was off by 4.4e-3 with ``error`` 1.9e-6 at 100): the residual is
    recomputed with a float64 product, so ``error`` bounds the distance of the value to the float64 Jacobian's
    nearest singular value, and to its norm where that is the nearest (at the float32 input given: at scale 30
    rounding the input to float32 alone moves the norm by 6e-5); inputs it cannot certify say so. The default
    call, on the CPU and on a GPU (where it presolves in bfloat16)."""
    for seed in range(3):
        fn, X = _attention_problem(seed, scale)
        on_device = MultiHeadMap(fn.heads.to(device))
        res = local_lipschitz(on_device, X.to(device, torch.float32), detailed=True)
        assert res.value.device.type == device
        value, error, converged = res.value.cpu(), res.error.cpu(), res.converged.cpu()
        near, top = nearest_and_top(fn, X.float().double(), value)
        assert bool((near <= error + 1e-6).all()), (near, error)
        premise = near == top
        assert bool((top[premise] <= error[premise] + 1e-6).all())
        assert bool((error[converged] <= 1e-4).all())


def test_float32_only_map_gets_a_float32_certificate() -> None:
    """A map whose output stays float32 for float64 inputs (a float32 closed form behind a cast) is certified by its
    float64 evaluation, made by promotion (its float32 parameters cast): ``error``, the float64 residual at the
    vector of a solve in float32, is at float32's level, and it holds against the float64 truth of the same map."""
    fn64, X = _attention_problem(0, 1.0)
    heads32 = MultiHeadMap(MultiHead(fn64.heads.A.float(), fn64.heads.V.float(), fn64.heads.W.float()))

    def fn32(Z: Tensor) -> Tensor:
        return heads32(Z.float())

    res = local_lipschitz(fn32, X, detailed=True)
    assert bool((res.error >= 64 * torch.finfo(torch.float32).eps).all())
    exact = exact_local_lipschitz(heads32, X.float())
    assert bool(((res.value.double() - exact).abs() / exact <= res.error).all())


# --------------------------------------------------------------------------- rtol and tol


def test_rtol_means_the_value_error_and_tol_the_residual() -> None:
    """``rtol=1e-10`` (which stopped at the default residual 1e-6 before, 4500x off) gives ``error ≤ 1e-10`` on
    converged inputs and a value that close to the dense norm; ``tol`` alone bounds the residual; the default
    is ``rtol=1e-4``."""
    fn, X = _attention_problem(1, 2.0)
    exact = exact_local_lipschitz(fn, X)
    tight = local_lipschitz(fn, X, rtol=1e-10, detailed=True)
    assert bool(tight.converged.all()) and bool((tight.error <= 1e-10).all())
    assert bool(((tight.value - exact).abs() / exact <= 1e-10).all())
    by_tol = local_lipschitz(fn, X, tol=1e-3, detailed=True)
    assert bool((by_tol.residual <= 1e-3).all())
    default = local_lipschitz(fn, X, detailed=True)
    assert bool(default.converged.all()) and bool((default.error <= 1e-4).all())
    assert bool(((default.value - exact).abs() / exact <= default.error).all())


def test_default_finds_the_top_where_top_directions_cross() -> None:
    """Inputs whose top two singular directions are swapped (input 1's top direction is input 0's second, as at
    a crossing; a start shared across the batch converged to the second there, 10% low): every input gets its
    own top singular value (``start="shared"`` is refused)."""
    g = torch.Generator().manual_seed(3)
    N, n, d = 20, 4, 5
    U = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=F64))[0]
    V = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=F64))[0]
    s0 = torch.linspace(1.0, 0.1, N, dtype=F64)
    s1 = s0.clone()
    s1[0], s1[1] = 0.9, 1.0
    J = torch.stack([U @ torch.diag(s0) @ V.T, U @ torch.diag(s1) @ V.T])

    def fn(Z: Tensor) -> Tensor:
        return torch.einsum("bij,bj->bi", J[: len(Z)], Z.flatten(1)).view(len(Z), n, d)

    X = torch.randn(2, n, d, generator=g, dtype=F64)
    res = local_lipschitz(fn, X, detailed=True)
    torch.testing.assert_close(res.value, torch.ones(2, dtype=F64), rtol=1e-4, atol=0)
    with pytest.raises(ValueError, match="lower singular value"):
        local_lipschitz(fn, X, start="shared")


# --------------------------------------------------------------------------- the probabilistic upper bound


@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_failure_epsilon_solves_the_published_bound(method: str) -> None:
    """``failure_epsilon(δ, N, k)`` is the ``ε`` at which Kuczyński & Woźniakowski's bound equals ``δ``, checked
    by evaluating the bound itself; it shrinks with ``k`` and is 1 (no claim) without products."""
    for delta, N, k in [(0.01, 49152, 10), (0.1, 20, 3), (1e-6, 1000, 40)]:
        eps = float(failure_epsilon(delta, N, k, method))
        if method == "lanczos":
            bound = KW_LANCZOS * math.sqrt(N) * math.exp(-math.sqrt(eps) * (2 * k - 1))
        else:
            bound = KW_POWER * math.sqrt(N) * (1 - eps) ** (k - 0.5)
        assert 0 < eps < 1
        assert bound == pytest.approx(delta, rel=1e-9)
        assert float(failure_epsilon(delta, N, k + 5, method)) < eps
    assert float(failure_epsilon(0.1, 100, 0, method)) == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lanczos", "power"])
def test_upper_fails_no_more_often_than_delta(method: str) -> None:
    """An adversarial spectrum for a random start (one top value, a crowd just below it, ``N = 20``) and 200
    random starts stopped early (``max_iter=4``): ``value ≤ ||J|| ≤ upper`` fails in at most ``δ = 0.1`` of them."""
    s = [1.0] + [0.97] * 12 + [0.5] * 7
    fn, X = spectrum_map([s])
    failures = 0
    for seed in range(200):
        res = local_lipschitz(fn, X, method=method, max_iter=4, seed=seed, confidence=0.1, detailed=True)
        failures += int(not (float(res.value) <= 1 + 1e-12 and float(res.upper) >= 1))
    assert failures <= 20


def test_confidence_gives_a_finite_upper_bound_and_runs_without_presolve() -> None:
    """With ``confidence`` the result carries ``upper ≥`` the dense norm, finite after enough products, and no
    presolve ran (the bound needs the random start's Krylov space); without it ``upper`` is None."""
    fn, X = _attention_problem(2, 1.0)
    f32 = MultiHeadMap(MultiHead(fn.heads.A.float(), fn.heads.V.float(), fn.heads.W.float()))
    res = local_lipschitz(f32, X.float(), confidence=0.01, rtol=1e-6, detailed=True)
    exact = exact_local_lipschitz(f32, X.float())
    assert bool((res.presolve_iterations == 0).all())
    assert bool(torch.isfinite(res.upper).all()) and bool((res.upper.double() >= exact).all())
    assert local_lipschitz(fn, X, detailed=True).upper is None


# --------------------------------------------------------------------------- scale


@pytest.mark.parametrize(("dtype", "size"), [(torch.float32, 1e-23), (torch.float32, 1e23),
                                              (F64, 1e-200), (F64, 1e200)])
def test_tiny_and_huge_jacobians(dtype: torch.dtype, size: float) -> None:
    """``JᵀJ`` of norm ``size²`` would under- or overflow: rescaled by a power of two, the value is ``size`` times
    the unscaled one, with a valid error, converged."""
    fn, X = _attention_problem(3, 1.0)
    base = exact_local_lipschitz(fn, X)

    def scaled(Z: Tensor) -> Tensor:
        return size * fn(Z)

    res = local_lipschitz(scaled, X.to(dtype), detailed=True)
    assert bool(res.converged.all())
    ratio = res.value.double() / size
    assert bool(((ratio - base).abs() / base <= res.error + 1e-6).all()), (ratio, base)


# --------------------------------------------------------------------------- maps that are not what they seem


def test_non_deterministic_map_is_refused_for_any_batch() -> None:
    """Dropout in training mode: two evaluations differ, for ``B = 1`` as for ``B = 2``."""
    drop = torch.nn.Dropout(0.5).train()

    def fn(Z: Tensor) -> Tensor:
        return drop(Z)

    for B in (1, 2):
        with pytest.raises(ValueError, match="not deterministic"):
            local_lipschitz(fn, torch.randn(B, 3, 4, dtype=F64))


def test_map_closing_over_per_batch_data_is_refused() -> None:
    """A map that closes over per-batch data (allowed for ``jacobian_matrix``) came out 1.5% wrong after converged
    inputs left and the rest were re-linearized on a sub-batch: now a ``ValueError``, however it shows."""
    g = torch.Generator().manual_seed(0)
    D = torch.ones(4, 3, 4, dtype=F64)
    D[3] = torch.rand(3, 4, generator=g, dtype=F64) + 0.5          # inputs 0-2: J = c I converges at once

    def sliced(Z: Tensor) -> Tensor:
        return Z * D[: len(Z)]

    X = torch.randn(4, 3, 4, generator=g, dtype=F64)
    with pytest.raises(ValueError, match="sub-batch"):
        local_lipschitz(sliced, X, tol=1e-10)

    def broadcast(Z: Tensor) -> Tensor:
        return Z * D

    with pytest.raises(ValueError, match="depends on the batch"):
        local_lipschitz(broadcast, X)


def test_a_linearization_of_another_map_is_refused() -> None:
    """``fn`` is the map linearized: a closed form that does not compute ``fn`` is a ``ValueError``."""
    fn, X = _attention_problem(4, 1.0)
    other, _ = _attention_problem(5, 1.0)

    class Wrong:
        def __call__(self, Z: Tensor) -> Tensor:
            return fn(Z)

        def linearize(self, Z: Tensor) -> object:
            return other.linearize(Z)

    with pytest.raises(ValueError, match="another map"):
        local_lipschitz(Wrong(), X)


def test_a_float64_evaluation_of_another_map_is_refused() -> None:
    """The float64 map that certifies a float32 run is checked on every input it linearizes, not only on the first
    input that told whether ``fn`` runs in float64: one that agrees there and nowhere else is a ``ValueError``."""
    fn, X = _attention_problem(10, 1.0, B=4)
    other, _ = _attention_problem(11, 1.0)
    first = X[0].float().double()

    class Wide:
        def __call__(self, Z: Tensor) -> Tensor:
            return self.linearize(Z).output

        def linearize(self, Z: Tensor) -> object:
            return (fn if len(Z) == 1 and torch.equal(Z[0], first) else other).linearize(Z)

    class Layer:
        def __call__(self, Z: Tensor) -> Tensor:
            return fn(Z)

        def linearize(self, Z: Tensor) -> object:
            return fn.linearize(Z)

        def float64_map(self) -> Wide:
            return Wide()

    with pytest.raises(ValueError, match="float64 linearization's output differs"):
        local_lipschitz(Layer(), X.float())


def test_float64_certificate_in_groups_of_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the float64 certificate of a float32 run linearizes the chunk a few inputs at a time (each group's
    float64 state under ``CERTIFY_BYTES``, so the allocator reuses its memory): values, errors and verdicts are
    those of one float64 linearization of the whole chunk, up to the rounding of float64 products."""
    fn, X = _attention_problem(9, 3.0, B=5)
    X = X.float()
    whole = local_lipschitz(fn, X, detailed=True)
    sizes: list[int] = []
    real = lipschitz.linearize

    def spy(f: object, Z: Tensor) -> object:
        if Z.dtype == F64:
            sizes.append(len(Z))
        return real(f, Z)

    monkeypatch.setattr(lipschitz, "linearize", spy)
    monkeypatch.setattr(lipschitz, "CERTIFY_BYTES", 2 * 2 * linearization_bytes(fn, X[:1]))
    groups = local_lipschitz(fn, X, detailed=True)
    assert sizes[:4] == [1, 2, 2, 1] and max(sizes) <= 2, sizes      # the probe of fn in float64, then the groups
    torch.testing.assert_close(groups.value, whole.value, rtol=1e-6, atol=0)
    torch.testing.assert_close(groups.error, whole.error, rtol=1e-6, atol=1e-15)
    assert torch.equal(groups.converged, whole.converged)


@pytest.mark.parametrize("scale", [1.0, 1e3])
def test_truncated_closed_form_is_the_map_it_evaluates(scale: float) -> None:
    """``MultiHeadMap`` drops the float32 rounding of ``A_h`` (rank ``k`` instead of ``d``): it evaluates the map
    it linearizes, so at large inputs (where the truncated linearization of the untruncated map was 11% off,
    certified at 1e-8) the certificate holds against the dense truth of the map called."""
    g = torch.Generator().manual_seed(6)
    H, k, d = 2, 2, 8
    Q, K = torch.randn(H, k, d, generator=g), torch.randn(H, k, d, generator=g)
    heads = MultiHead.from_projections(Q, K, torch.randn(H, k, d, generator=g), torch.randn(H, d, k, generator=g))
    fn = MultiHeadMap(heads)
    X = scale * torch.randn(2, 5, d, generator=g, dtype=F64) / math.sqrt(d)
    res = local_lipschitz(fn, X, detailed=True)
    near, top = nearest_and_top(fn, X, res.value)
    assert bool((near <= res.error).all())
    assert bool((top[near == top] <= res.error[near == top]).all())


# --------------------------------------------------------------------------- no side effects


def _fault_loop(rounds: int = 20) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        buf = torch.empty(4 << 20)                 # 16 MB
        buf.fill_(1.0)
        del buf
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_no_process_wide_side_effects() -> None:
    """A ``local_lipschitz`` call leaves the process as it found it: a loop of 16 MB allocations faults as many
    pages after the call as before, each measured after one warm-up loop (glibc's mmap threshold untouched);
    threads, torch flags and the global RNG state are unchanged."""
    fn, X = _attention_problem(7, 2.0, B=4, n=32, d=8)
    _fault_loop()
    before = _fault_loop()
    threads, interop = torch.get_num_threads(), torch.get_num_interop_threads()
    rng = torch.get_rng_state()
    flags = (torch.are_deterministic_algorithms_enabled(), torch.is_grad_enabled(), torch.get_default_dtype(),
             torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    local_lipschitz(fn, X.float())
    local_lipschitz(lambda Z: fn(Z), X)
    # As before the calls, one loop first: the first 16 MB after a call that freed memory may refault the pages
    # glibc returned (a trimmed heap, once); a changed mmap threshold would fault on every round of the next loop.
    _fault_loop()
    after = _fault_loop()
    assert after <= before + 0.05 * 20 * 4096, (before, after)       # 20 rounds of 4096 pages
    assert (torch.get_num_threads(), torch.get_num_interop_threads()) == (threads, interop)
    assert torch.equal(torch.get_rng_state(), rng)
    assert flags == (torch.are_deterministic_algorithms_enabled(), torch.is_grad_enabled(), torch.get_default_dtype(),
                     torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())


def test_not_converged_warning_names_the_test() -> None:
    """An input that cannot be certified within ``max_iter`` warns with the asked test."""
    fn, X = _attention_problem(8, 3.0)
    with pytest.warns(NotConvergedWarning, match="rtol=0.0001"):
        local_lipschitz(fn, X, max_iter=1)
