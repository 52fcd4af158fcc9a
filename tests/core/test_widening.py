"""What a float32 run certifies, against dense float64 truth (the Jacobian of the same map with its float32 weights
cast to float64) on the float32 maps where float32's own products cannot be trusted: saturated self-attention
(issue 53: 13 of 640 results were off by up to 17x their ``error``, converged), clustered and crossing top singular
values, Jacobians of norm 1e-23 and 1e20. Two paths: maps that close over float32 tensors get their float64
evaluation by promotion (:func:`lipnb.core.widening._promoted`); a closed form that refuses float64 gets the float32
certificate (:func:`lipnb.core.certify.float32_certificate`), which may flag an input but must never report a
converged value its error does not bound."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import Tensor

from lipnb.core.dense import jacobian_matrix
from lipnb.core.lipschitz import local_lipschitz
from lipnb.core.widening import _promoted
from lipnb.experiments.certificate import _orthogonal, spectrum
from lipnb.experiments.float32_audit import Float32Only, saturated_head

F32, F64 = torch.float32, torch.float64
SVD_SLACK = 1e-12          # the dense float64 SVD's own rounding, relative
SCALES = (10.0, 20.0, 30.0, 50.0, 100.0)


def saturated(scale: float, seed: int) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor], Tensor]:
    """Issue 53's family: single-head self-attention with float32 ``A``, ``V`` (``d = 4``) and 4 inputs of ``n = 6``
    float32 tokens of norm ``scale``; the map, its float64 evaluation (the weights cast) and the inputs."""
    return saturated_head(scale, seed, inputs=4, n=6, d=4)


def distances(truth: Callable[[Tensor], Tensor], X: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """Relative distance from ``value`` to the nearest singular value of the dense float64 Jacobian of ``truth`` at
    ``X``, and ``(value - σ₁) / σ₁``."""
    sv = torch.linalg.svdvals(jacobian_matrix(truth, X.double()))
    v = value.double()
    return ((sv - v.unsqueeze(1)).abs() / v.unsqueeze(1)).min(1).values, (v - sv[:, 0]) / sv[:, 0]


def assert_certified(truth: Callable[[Tensor], Tensor], X: Tensor, res: object, every: bool) -> int:
    """Every converged result (every result, with ``every``) is within its ``error`` of a singular value of the
    truth and not above ``σ₁`` beyond it; a converged one meets ``rtol = 1e-4``. Returns how many converged."""
    near, above = distances(truth, X, res.value)
    checked = torch.ones_like(res.converged) if every else res.converged
    slack = res.error.double() + SVD_SLACK
    assert bool((near[checked] <= slack[checked]).all()), (near[checked] / res.error[checked]).max()
    assert bool((above[checked] <= slack[checked]).all())
    assert bool((res.error[res.converged] <= 1e-4).all())
    return int(res.converged.sum())


def family(seeds: range, scales: tuple[float, ...] = SCALES) -> Iterator[tuple[Callable, Callable, Tensor]]:
    for scale in scales:
        for seed in seeds:
            yield saturated(scale, seed)


def run_family(seeds: range, scales: tuple[float, ...], only32: bool) -> tuple[int, int]:
    converged = total = 0
    for fn, truth, X in family(seeds, scales):
        res = local_lipschitz(Float32Only(fn) if only32 else fn, X, detailed=True)
        converged += assert_certified(truth, X, res, every=not only32)
        total += len(X)
    return converged, total


def test_float32_weights_are_promoted_and_certified_in_float64() -> None:
    """The issue's family (5 scales from 10 to 100, 40 seeds, 4 inputs each): the map closes over float32 weights
    and refuses float64 inputs as written, so its float64 evaluation is made by promotion, and every one of the 800
    results is within its ``error`` of a singular value of the float64 truth, never above ``σ₁``; all but at most
    two converge (whether an input at the edge of ``rtol`` converges depends on the CPU's float32 kernels: 799 on
    the portable ones)."""
    converged, total = run_family(range(40), SCALES, only32=False)
    assert total == 800 and converged >= 798


def test_float32_only_map_flags_what_float32_cannot_certify() -> None:
    """The same family as a closed form that refuses float64 (3 scales, 40 seeds): the float32 certificate's
    rounding probes make ``error`` honest; no converged result is off by more than its ``error`` (before, 64 float32
    units were assumed: up to 17x breaches, converged), and the inputs float32 cannot resolve are flagged."""
    converged, total = run_family(range(40), (10.0, 30.0, 100.0), only32=True)
    assert total == 480 and 240 <= converged < total


@pytest.mark.slow
@pytest.mark.parametrize("only32", [False, True], ids=["promoted", "float32-only"])
def test_float32_family_at_scale(only32: bool) -> None:
    """The family with 200 seeds per scale (4,000 results per path): no converged result off by more than its
    ``error`` (promoted: none at all); a float32 solve whose float64 certificate misses ``rtol`` is flagged (1 of
    4,000 when last run). The float32-only path converges on about 72% of the family (2,891 of 4,000 on the
    portable kernels with the premise's factor 32, which one breach by 2.5% at factor 16 there set): the rest is
    flagged, not wrong."""
    converged, total = run_family(range(200), SCALES, only32=only32)
    assert total == 4000 and converged >= (2800 if only32 else 3990)


def quadratic(spectra: Tensor, n: int, d: int, seed: int, scale: float) -> tuple[Callable, Callable, Tensor]:
    """``x -> scale · U (Vᵀx)² / 2`` with float32 ``U``, ``V`` (closed over, no cast: the map refuses float64 as
    written), at inputs whose Jacobians have about the singular values ``scale · spectra[b]``; with its float64
    evaluation (the same float32 ``U``, ``V`` cast) for the truth."""
    g = torch.Generator().manual_seed(seed)
    U, V = _orthogonal(n * d, g).float(), _orthogonal(n * d, g).float()
    signs = torch.where(torch.rand(spectra.shape, generator=g) < 0.5, -1.0, 1.0).double()
    X = ((spectra * signs) @ V.double().T).float().view(len(spectra), n, d)

    def fn(Z: Tensor) -> Tensor:
        return (scale * 0.5 * (Z.flatten(1) @ V).square() @ U.T).view(Z.shape)

    def truth(Z: Tensor) -> Tensor:
        return (scale * 0.5 * (Z.flatten(1) @ V.double()).square() @ U.double().T).view(Z.shape)

    return fn, truth, X


def hard_cases() -> Iterator[tuple[str, Callable, Callable, Tensor]]:
    """Clustered top singular values (gaps 1e-2 to 1e-8, repeated), a crossing along the batch, extreme scales."""
    n, d = 4, 4
    for kind in ("gap-1e-2", "gap-1e-4", "gap-1e-8", "repeated"):
        g = torch.Generator().manual_seed(len(kind))
        yield (kind, *quadratic(torch.stack([spectrum(kind, n * d, g) for _ in range(4)]), n, d, 1, 1.0))
    t = torch.linspace(0.1, -0.1, 6, dtype=F64)
    rest = (0.1 + 0.7 * torch.rand(n * d - 2, generator=torch.Generator().manual_seed(5), dtype=F64)).expand(6, -1)
    yield ("crossing", *quadratic(torch.cat([(1 + t).unsqueeze(1), (1 - t).unsqueeze(1), rest], 1), n, d, 2, 1.0))
    for scale in (1e-23, 1e20):
        g = torch.Generator().manual_seed(7)
        yield (f"scale-{scale:g}",
               *quadratic(torch.stack([spectrum("gap-1e-4", n * d, g) for _ in range(4)]), n, d, 3, scale))


@pytest.mark.parametrize("only32", [False, True], ids=["promoted", "float32-only"])
def test_float32_hard_cases_against_float64_truth(only32: bool) -> None:
    """Both paths on the hard cases, several starts each: every converged value is within its ``error`` of a
    singular value of the float64 truth and not above ``σ₁``; where that singular value is ``σ₁`` (the premise) the
    value is within ``error`` of the norm, and a miss stays within the top cluster's width (here 2e-4 at most)."""
    for name, fn, truth, X in hard_cases():
        for seed in range(3):
            res = local_lipschitz(Float32Only(fn) if only32 else fn, X, seed=seed, detailed=True)
            assert_certified(truth, X, res, every=not only32)
            _, above = distances(truth, X, res.value)
            top = above.abs()
            assert bool((top[res.converged] <= 2e-4 + res.error[res.converged]).all()), name
            if name.startswith("scale"):
                assert bool(res.converged.all()) and math.isfinite(float(res.value.max())), name


def test_promotion_computes_the_float64_evaluation_and_leaves_no_trace() -> None:
    """``_promoted(fn)`` is ``fn`` with its float32 tensors cast to float64 (here bit for bit the float64 weights'
    map); the closed-over weights stay float32 and the default dtype is restored."""
    fn, truth, X = saturated(30.0, 0)
    assert torch.equal(_promoted(fn)(X.double()), truth(X.double()))
    assert torch.get_default_dtype() == F32
    with pytest.raises(RuntimeError):
        fn(X.double())
