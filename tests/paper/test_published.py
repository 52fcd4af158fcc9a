"""The paper's published estimator and ``compute_A``, reproduced, against dense Jacobians and the HF modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from lipnb import exact_local_lipschitz, jacobian_matrix, models, self_attention
from lipnb.paper.paper_settings import (
    decoder_output_tuple_map,
    paper_random_gpt2,
    random_gpt2_attention,
    training_inputs,
)
from lipnb.paper.published import (
    first_step_stop_probability,
    published_A,
    published_A_cosines,
    published_closed_form,
    published_estimator,
    published_run,
)


def _dense_published(fn, X: torch.Tensor) -> torch.Tensor:
    """``√‖Jᵀ f(X)‖`` from the dense float64 Jacobian, one input at a time."""
    values = []
    for b in range(len(X)):
        x = X[b:b + 1]
        J = jacobian_matrix(fn, x).reshape(-1, x.numel())
        values.append((J.T @ fn(x).reshape(-1)).norm().sqrt())
    return torch.stack(values)


@given(seed=st.integers(0, 10_000), n=st.integers(2, 6))
def test_published_estimator_is_sqrt_norm_of_jt_f(seed: int, n: int) -> None:
    g = torch.Generator().manual_seed(seed)
    d = 4
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    V = torch.randn(d, d, generator=g, dtype=torch.float64)
    X = torch.randn(2, n, d, generator=g, dtype=torch.float64)

    def fn(Y: torch.Tensor) -> torch.Tensor:
        return self_attention(Y, A, V)

    dense = _dense_published(fn, X)
    # A threshold far below any first quotient: the loop converges (the first-step stop is tested below).
    torch.testing.assert_close(published_estimator(fn, X, threshold=1e-12, seed=seed), dense, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(published_closed_form(fn, X), dense, rtol=1e-9, atol=1e-12)


def test_published_estimator_is_not_the_local_constant() -> None:
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 4, generator=g, dtype=torch.float64)
    X = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)

    def fn(Y: torch.Tensor) -> torch.Tensor:
        return self_attention(Y, A, torch.eye(4, dtype=torch.float64))

    ratio = published_estimator(fn, X) / exact_local_lipschitz(fn, X)
    assert bool(((ratio - 1).abs() > 0.05).all()), ratio


def test_published_estimator_rejects_unbatched_input() -> None:
    with pytest.raises(ValueError, match="Y must be"):
        published_estimator(lambda Y: Y, torch.zeros(3, 4))


@pytest.fixture(scope="module")
def minilm() -> torch.nn.Module:
    return models.load("minilm")[0]


@pytest.fixture(scope="module")
def gpt2() -> torch.nn.Module:
    return models.load("gpt2-random")[0]


def test_bert_published_A_is_the_head_matrix(minilm: torch.nn.Module) -> None:
    heads = models.head_matrices(minilm, 1)
    for h in (0, 5, 11):
        torch.testing.assert_close(published_A(minilm, 1, h), heads.A[h], rtol=1e-5, atol=1e-6)


def test_gpt2_published_A_is_unrelated_to_the_module_scores(gpt2: torch.nn.Module) -> None:
    """The true ``A_h`` reproduces GPT2Attention's attention matrix; the published one does not."""
    X = torch.randn(1, 6, 768, generator=torch.Generator().manual_seed(1))
    attn = gpt2.h[3].attn
    q, k, _ = attn.c_attn(X).split(768, dim=-1)
    h = 2
    cols = slice(64 * h, 64 * (h + 1))
    scores = q[0, :, cols] @ k[0, :, cols].T / 8
    bias_free = scores - (attn.c_attn.bias[:768][cols] @ k[0, :, cols].T / 8)
    true = models.head_matrices(gpt2, 3).A[h]
    torch.testing.assert_close(X[0] @ true.T @ X[0].T, bias_free, rtol=1e-4, atol=1e-4)
    wrong = published_A(gpt2, 3, h)
    assert abs(F.cosine_similarity(wrong.flatten(), true.flatten(), 0).item()) < 0.05


def test_published_A_cosines(minilm: torch.nn.Module, gpt2: torch.nn.Module) -> None:
    """One cosine per layer and head: 1 for BERT (``compute_A`` is right there), near 0 for GPT-2, and the
    entry of layer 3, head 2 is the cosine computed above by hand."""
    bert = published_A_cosines(minilm)
    assert bert.shape == (6, 12) and float((bert - 1).abs().max()) < 1e-5
    cos = published_A_cosines(gpt2)
    assert cos.shape == (12, 12) and float(cos.abs().max()) < 0.1
    true, wrong = models.head_matrices(gpt2, 3).A[2], published_A(gpt2, 3, 2)
    assert cos[3, 2].item() == pytest.approx(F.cosine_similarity(wrong.flatten(), true.flatten(), 0).item(), abs=1e-6)


def test_published_run_stops_each_input_at_its_first_step_within_the_threshold() -> None:
    """A first quotient within the threshold of zero stops that input at once: √μ₀, NaN when μ₀ < 0."""
    g = torch.Generator().manual_seed(3)
    Y = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    scale = torch.tensor([1e-3, 1e-3, 1.0, 1.0], dtype=torch.float64).view(-1, 1, 1)

    def fn(X: torch.Tensor) -> torch.Tensor:          # Jᵀ f = scale² X: tiny for the first two inputs
        return scale * X

    run = published_run(fn, Y, threshold=1e-4, seed=7)
    u0 = torch.randn(Y.shape, generator=torch.Generator().manual_seed(7), dtype=Y.dtype)
    mu0 = (u0 / u0.flatten(1).norm(dim=1).view(-1, 1, 1) * scale**2 * Y).flatten(1).sum(1)
    assert run.steps.tolist() == [1, 1, 3, 3]
    torch.testing.assert_close(run.first, mu0)
    expected = torch.cat([mu0[:2].sqrt(), (Y[2:].flatten(1).norm(dim=1)).sqrt()])
    torch.testing.assert_close(run.value, expected, equal_nan=True)
    assert bool(run.value[:2].isnan().any() == (mu0[:2] < 0).any())


def test_first_step_stop_probability_matches_sampling() -> None:
    size, norm, threshold = 50, 2.0, 0.15
    u = torch.randn(40_000, size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.zeros(size, dtype=torch.float64)
    w[0] = norm
    sampled = ((u / u.norm(dim=1, keepdim=True)) @ w).abs().le(threshold).double().mean()
    p = first_step_stop_probability(torch.tensor(norm), size, threshold)
    assert abs(sampled - p) < 5 * (p * (1 - p) / 40_000) ** 0.5, (sampled, p)


def test_first_step_stop_probability_rejects_small_size() -> None:
    with pytest.raises(ValueError, match="size must be"):
        first_step_stop_probability(torch.tensor(1.0), 1, 0.1)


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "sums"), [
    # Sums of three weights of GPT2Model(GPT2Config()) after torch.manual_seed(seed), drawn by transformers==4.37.2
    # (the version the published scripts pin): h.6.attn.c_attn.weight, h.6.attn.c_proj.weight, wte.weight.
    (0, (-34.96911321536341, -2.0709446676399685, 165.80015545264092)),
    (320, (-9.341164979160112, -4.49221878833835, 207.69300971077834)),
])
def test_paper_random_gpt2_draws_the_pinned_versions_weights(seed: int, sums: tuple[float, float, float]) -> None:
    model = paper_random_gpt2(seed)
    assert model.training
    drawn = [model.h[6].attn.c_attn.weight.double(), model.h[6].attn.c_proj.weight.double(), model.wte.weight.double()]
    # torch's CPU normal sampler rounds differently in its vectorised (AVX2) and portable kernels, by float32
    # rounding per weight: each sum may move by 1e-6 of the weights' absolute sum; another seed moves it by
    # about sqrt(size) standard deviations, a thousand times more or so.
    for w, expected in zip(drawn, sums, strict=True):
        assert abs(float(w.sum()) - expected) <= 1e-6 * float(w.abs().sum())


def test_training_inputs_in_eval_mode_are_the_attention_inputs(gpt2: torch.nn.Module) -> None:
    ids = torch.arange(10, 22).view(2, 6)
    torch.testing.assert_close(training_inputs(gpt2, 6, ids), models.attention_inputs(gpt2, 6, ids))


def test_random_gpt2_attention_is_the_causal_layer(gpt2: torch.nn.Module) -> None:
    X = torch.randn(1, 5, 768, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(random_gpt2_attention(gpt2, 6)(X), models.attention_map(gpt2, 6, "self")(X),
                               rtol=1e-5, atol=1e-6)


def test_decoder_output_tuple_map_is_context_key_value() -> None:
    decoder = models.load("minilm-decoder")[0]
    sa = decoder.encoder.layer[1].attention.self
    X = torch.randn(1, 4, 384, generator=torch.Generator().manual_seed(5))
    out = decoder_output_tuple_map(decoder, 1)(X)
    torch.testing.assert_close(out[:, :4], sa(X)[0])
    torch.testing.assert_close(out[:, 4:], torch.cat([sa.key(X), sa.value(X)], dim=1))
    with pytest.raises(TypeError, match="BERT decoder"):
        decoder_output_tuple_map(models.load("minilm")[0], 1)
