"""The normalizations of :mod:`lipnb.core.normalization` (Sec. 2.3): LayerNorm and RMSNorm, the sphere their
outputs lie on, the exact radius of their image, and absorbing them into the attention weights."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import random_multihead

from lipnb import multihead_attention
from lipnb.core.normalization import (
    absorb_normalization,
    layer_norm,
    normalization_radius,
    normalization_radius_bound,
    normalize_tokens,
    rms_norm,
)

F64 = torch.float64


def _circle(d: int, center: bool, points: int = 200_001) -> torch.Tensor:
    """Dense samples of ``{|z| = sqrt(d)}`` (``d = 2``) or ``{|z| = sqrt(d), sum z = 0}`` (``d = 3``)."""
    theta = torch.linspace(0, 2 * math.pi, points, dtype=F64)
    if center:
        e1 = torch.tensor([1.0, -1.0, 0.0], dtype=F64) / math.sqrt(2)
        e2 = torch.tensor([1.0, 1.0, -2.0], dtype=F64) / math.sqrt(6)
    else:
        e1, e2 = torch.eye(2, dtype=F64)
    return math.sqrt(d) * (theta.cos()[:, None] * e1 + theta.sin()[:, None] * e2)


def test_norms_match_torch(gen: torch.Generator) -> None:
    d = 12
    x = 3 * torch.randn(50, d, generator=gen, dtype=F64) + 1
    g, b = torch.rand(d, generator=gen, dtype=F64) + 0.1, torch.randn(d, generator=gen, dtype=F64)
    assert torch.allclose(layer_norm(x, g, b, 1e-5), torch.nn.functional.layer_norm(x, (d,), g, b, 1e-5),
                          atol=1e-13, rtol=0)
    assert torch.allclose(rms_norm(x, g, 1e-6), torch.nn.functional.rms_norm(x, (d,), g, 1e-6), atol=1e-13, rtol=0)


def test_normalized_tokens_lie_on_the_sphere(gen: torch.Generator) -> None:
    """Sec. 2.3: ``sum z = 0`` and ``|z|² = d σ²/(σ² + eps)`` (LayerNorm), ``|z|² = d μ₂/(μ₂ + eps)`` (RMSNorm)."""
    d, eps = 20, 1e-2
    x = torch.randn(2, 7, d, generator=gen, dtype=F64)
    z = normalize_tokens(x, center=True, eps=eps)
    var = x.var(-1, unbiased=False)
    assert z.sum(-1).abs().max() < 1e-12
    assert torch.allclose(z.square().sum(-1), d * var / (var + eps), rtol=1e-13, atol=0)
    r = normalize_tokens(x, center=False, eps=eps)
    ms = x.square().mean(-1)
    assert torch.allclose(r.square().sum(-1), d * ms / (ms + eps), rtol=1e-13, atol=0)
    assert torch.allclose(normalize_tokens(x, center=False).norm(dim=-1), torch.full_like(ms, math.sqrt(d)))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("center", [True, False])
def test_normalization_radius_matches_a_scan(seed: int, center: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    d = 3 if center else 2
    g = torch.rand(d, generator=gen, dtype=F64) + 0.1
    b = torch.randn(d, generator=gen, dtype=F64)
    R, z = normalization_radius(g, b, center=center)
    scan = (b + g * _circle(d, center)).norm(dim=1).max()
    assert abs(R - scan) < 1e-8 and scan <= R + 1e-12
    assert abs(z.norm() - math.sqrt(d)) < 1e-12
    if center:
        assert abs(z.sum()) < 1e-12
    assert abs((b + g * z).norm() - R) < 1e-12
    assert R <= normalization_radius_bound(g, b) + 1e-12


def test_normalization_radius_without_shift(gen: torch.Generator) -> None:
    """β = 0 is the hard case of the secular equation: ``R = sqrt(d) ||diag(γ) P||`` (RMSNorm: ``sqrt(d) max|γ|``)."""
    d = 10
    g = torch.rand(d, generator=gen, dtype=F64) + 0.1
    P = torch.eye(d, dtype=F64) - 1.0 / d
    R, z = normalization_radius(g)
    assert abs(R - math.sqrt(d) * torch.linalg.matrix_norm(g[:, None] * P, ord=2)) < 1e-12
    assert abs(z.sum()) < 1e-12 and abs(z.norm() - math.sqrt(d)) < 1e-12
    R_rms, _ = normalization_radius(g, center=False)
    assert abs(R_rms - normalization_radius_bound(g)) < 1e-12


def test_normalization_radius_contains_all_outputs(gen: torch.Generator) -> None:
    d = 64
    g, b = torch.rand(d, generator=gen, dtype=F64), 0.3 * torch.randn(d, generator=gen, dtype=F64)
    R, z = normalization_radius(g, b)
    outputs = layer_norm(torch.randn(5000, d, generator=gen, dtype=F64), g, b, eps=1e-5)
    assert bool((outputs.norm(dim=1) <= R).all())
    # the maximizer is a local maximum on the constraint set, and LayerNorm attains it
    for _ in range(20):
        nearby = normalize_tokens((z + 0.01 * torch.randn(d, generator=gen, dtype=F64))[None])[0]
        assert (b + g * nearby).norm() <= R + 1e-12
    assert abs(layer_norm(z[None], g, b, eps=0.0)[0].norm() - R) < 1e-12


@pytest.mark.parametrize("biases", [True, False])
def test_absorb_normalization(gen: torch.Generator, biases: bool) -> None:
    """Sec. 2.3: attention after RMSNorm / LayerNorm = absorbed attention on the normalized tokens."""
    d = 8
    heads = random_multihead(gen, d=d, biases=biases)
    X = 2 * torch.randn(2, 6, d, generator=gen, dtype=F64) + 0.5
    g, b = torch.rand(d, generator=gen, dtype=F64) + 0.2, torch.randn(d, generator=gen, dtype=F64)
    rms = multihead_attention(rms_norm(X, g, 1e-6), heads)
    rms_absorbed = multihead_attention(normalize_tokens(X, center=False, eps=1e-6), absorb_normalization(heads, g))
    assert ((rms - rms_absorbed).norm() / rms.norm()) < 1e-13
    ln = multihead_attention(layer_norm(X, g, b, 1e-5), heads)
    ln_absorbed = multihead_attention(normalize_tokens(X, eps=1e-5), absorb_normalization(heads, g, b))
    assert ((ln - ln_absorbed).norm() / ln.norm()) < 1e-13
