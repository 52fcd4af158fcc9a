"""Bad input gets a ValueError or TypeError that names the argument (issue list of the estimator audit):
never a number, a raw torch error, or a value certified by a test that does not apply."""

from __future__ import annotations

import math

import pytest
import torch

from lipnb import MultiHeadMap, data, local_lipschitz, models, self_attention
from lipnb.core import bounds
from lipnb.core.dense import exact_local_lipschitz

F64 = torch.float64


def problem(seed: int = 0) -> tuple[torch.Tensor, object]:
    g = torch.Generator().manual_seed(seed)
    A, V = torch.randn(2, 4, 4, generator=g, dtype=F64)
    X = 2 * torch.randn(3, 6, 4, generator=g, dtype=F64)
    return X, lambda Z: self_attention(Z, A.to(Z.dtype), V.to(Z.dtype))


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"max_iter": 1.5}, TypeError, "max_iter"),
    ({"max_iter": "10"}, TypeError, "max_iter"),
    ({"max_iter": 0}, ValueError, "max_iter"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"tol": math.inf}, ValueError, "tol"),
    ({"tol": 0.0}, ValueError, "tol"),
    ({"tol": 1.5}, ValueError, "tol"),
    ({"tol": float("nan")}, ValueError, "tol"),
    ({"dtype": torch.int64}, TypeError, "dtype"),
    ({"dtype": torch.bfloat16}, TypeError, "dtype"),
    ({"dtype": torch.float16}, TypeError, "dtype"),
])
def test_local_lipschitz_refuses_bad_settings(kwargs: dict, error: type, match: str) -> None:
    X, f = problem()
    with pytest.raises(error, match=match):
        local_lipschitz(f, X, **kwargs)


def test_local_lipschitz_refuses_a_non_callable() -> None:
    X, _ = problem()
    with pytest.raises(TypeError, match="fn must be a callable"):
        local_lipschitz(None, X)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_a_map_that_returns_low_precision_is_not_certified(low: torch.dtype) -> None:
    """Its products are too coarse for a residual test at tol = 1e-6 (bfloat16 once stopped after one step)."""
    X, f = problem()
    with pytest.raises(TypeError, match=str(low).split(".")[-1]):
        local_lipschitz(lambda Z: f(Z.to(low)), X.float())


def test_a_map_that_mixes_the_batch_is_refused() -> None:
    X, f = problem()
    with pytest.raises(ValueError, match="mixes the inputs of a batch"):
        local_lipschitz(lambda Z: f(Z - Z.mean(0, keepdim=True)), X)


def test_the_batch_probe_accepts_a_map_that_acts_on_each_input_alone() -> None:
    X, f = problem()
    torch.testing.assert_close(local_lipschitz(f, X, tol=1e-10), exact_local_lipschitz(f, X), rtol=1e-8, atol=0)


def test_the_closed_form_map_is_not_probed_and_still_agrees() -> None:
    g = torch.Generator().manual_seed(3)
    from conftest import random_multihead

    fn = MultiHeadMap(random_multihead(g))
    X = torch.randn(2, 5, 8, generator=g, dtype=F64)
    torch.testing.assert_close(local_lipschitz(fn, X, tol=1e-10), exact_local_lipschitz(fn, X), rtol=1e-8, atol=0)


@pytest.fixture(scope="module")
def gpt2() -> torch.nn.Module:
    model, _ = models.load("gpt2-random", device="cpu")
    return model


@pytest.mark.parametrize(("layer", "error"), [(2.0, TypeError), (True, TypeError), (-1, ValueError), (99, ValueError)])
def test_attention_map_refuses_a_bad_layer(gpt2: torch.nn.Module, layer: object, error: type) -> None:
    with pytest.raises(error, match="layer"):
        models.attention_map(gpt2, layer)


def test_loading_on_a_missing_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        models.load("gpt2-random", device="cuda")


@pytest.mark.parametrize(("per_length", "error"), [(2.5, TypeError), (0, ValueError), (True, TypeError)])
def test_token_sequences_refuses_a_bad_count(per_length: object, error: type) -> None:
    with pytest.raises(error, match="per_length"):
        data.token_sequences("some text", None, (4,), per_length=per_length)


def test_lemma_3_8_refuses_mismatched_or_negative_constants() -> None:
    W = torch.randn(3, 4, 2, dtype=F64)
    with pytest.raises(ValueError, match="one row per head"):
        bounds._lemma_3_8(W, torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=">= 0"):
        bounds._lemma_3_8(W, torch.tensor([1.0, -1.0, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="finite"):
        bounds._lemma_3_8(W, torch.tensor([1.0, math.nan, 1.0], dtype=F64))


@pytest.mark.parametrize(("bias", "error", "match"), [
    (torch.tensor([math.nan, 0.0, 0.0, 0.0], dtype=F64), ValueError, "NaN"),
    (torch.zeros(3, dtype=F64), ValueError, "shape"),
    ([0.0, 0.0, 0.0, 0.0], TypeError, "score_bias"),
])
def test_theorem_e_3_refuses_a_bad_score_bias(bias: object, error: type, match: str) -> None:
    A, V = torch.eye(4, dtype=F64), torch.eye(4, dtype=F64)
    for bound in (bounds.theorem_e_3, bounds.theorem_e_3_sharpened):
        with pytest.raises(error, match=match):
            bound(A, V, 1.0, 4, bias)
