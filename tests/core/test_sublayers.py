"""lipnb.core.sublayers: the residual attention sub-layers' closed-form Jacobians against autograd in float64."""

from __future__ import annotations

import pytest
import torch
from conftest import random_multihead

from lipnb import MultiHeadMap
from lipnb.core.normalization import layer_norm
from lipnb.core.sublayers import ResidualAttentionMap

F64 = torch.float64


def sublayer(gen: torch.Generator, post: bool, masked: bool = False, d: int = 8) -> ResidualAttentionMap:
    gamma = 1 + 0.3 * torch.randn(d, generator=gen, dtype=F64)
    beta = 0.1 * torch.randn(d, generator=gen, dtype=F64)
    return ResidualAttentionMap(MultiHeadMap(random_multihead(gen, d=d), masked=masked), gamma, beta, 1e-5, post)


@pytest.mark.parametrize(("post", "masked"), [(True, False), (False, False), (False, True)])
def test_closed_form_products_equal_autograd(gen: torch.Generator, post: bool, masked: bool) -> None:
    fn = sublayer(gen, post, masked)
    X, E, G = (torch.randn(3, 5, 8, generator=gen, dtype=F64) for _ in range(3))
    lin = fn.linearize(X)
    out, jvp = torch.func.jvp(fn, (X,), (E,))
    _, pullback = torch.func.vjp(fn, X)
    torch.testing.assert_close(lin.output, out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lin.jvp(E.clone()), jvp, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(lin.vjp(G.clone()), pullback(G)[0], rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("post", [True, False])
def test_the_map_is_the_textbook_sublayer(gen: torch.Generator, post: bool) -> None:
    """Post-LN ``LayerNorm(X + f(X))`` (BERT) and pre-LN ``X + f(LayerNorm(X))`` (GPT-2), written out."""
    fn = sublayer(gen, post)
    X = torch.randn(2, 4, 8, generator=gen, dtype=F64)
    ln = torch.nn.functional.layer_norm
    f = fn.attention
    expected = ln(X + f(X), (8,), fn.gamma, fn.beta, 1e-5) if post else X + f(ln(X, (8,), fn.gamma, fn.beta, 1e-5))
    torch.testing.assert_close(fn(X), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer_norm(X, fn.gamma, fn.beta, 1e-5), ln(X, (8,), fn.gamma, fn.beta, 1e-5),
                               rtol=1e-12, atol=1e-12)


def test_select_is_the_linearization_of_the_sub_batch(gen: torch.Generator) -> None:
    fn = sublayer(gen, post=True)
    X, E = torch.randn(4, 5, 8, generator=gen, dtype=F64), torch.randn(2, 5, 8, generator=gen, dtype=F64)
    index = torch.tensor([3, 1])
    sub, direct = fn.linearize(X).select(index), fn.linearize(X[index])
    torch.testing.assert_close(sub.jvp(E.clone()), direct.jvp(E.clone()), rtol=1e-12, atol=1e-12)


def test_bad_parameters_are_refused(gen: torch.Generator) -> None:
    f = MultiHeadMap(random_multihead(gen, d=8))
    with pytest.raises(ValueError, match="gamma"):
        ResidualAttentionMap(f, torch.ones(7, dtype=F64), torch.zeros(8, dtype=F64), 1e-5, True)
    with pytest.raises(ValueError, match="eps"):
        ResidualAttentionMap(f, torch.ones(8, dtype=F64), torch.zeros(8, dtype=F64), -1.0, True)
