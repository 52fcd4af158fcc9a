"""lipnb.experiments.live_benchmark: the closed forms against autograd through a real layer, and the live timing's
accuracy against dense float64 Jacobians."""

from __future__ import annotations

import copy

import pytest
import torch

import lipnb
from lipnb import data, models
from lipnb.core import jacobian
from lipnb.core.dense import exact_local_lipschitz
from lipnb.experiments import live_benchmark


@pytest.fixture(scope="module")
def minilm() -> tuple:
    return models.load("minilm", device="cpu")


def _ids(tokenizer: object, n: int, count: int) -> torch.Tensor:
    return data.token_sequences(data.alice_text(), tokenizer, [n], count)[n]


@pytest.mark.slow
def test_closed_forms_agree_with_autograd_and_a_wrong_one_is_seen(minilm: tuple,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Every map kind's closed-form f(X), J E and Jᵀ G equal autograd's to float64 rounding; a closed-form
    product made wrong (doubled) shows as a gap of order one."""
    model, tokenizer = minilm
    ids = _ids(tokenizer, 6, 2)
    gaps = live_benchmark.closed_form_gaps(model, 1, ids)
    assert set(gaps) == set(models.KINDS) and max(gaps.values()) < 1e-12
    jvp = jacobian.AttentionLinearization.jvp
    monkeypatch.setattr(jacobian.AttentionLinearization, "jvp", lambda self, E: 2 * jvp(self, E))
    wrong = live_benchmark.closed_form_gaps(model, 1, ids)
    assert wrong["mha"] > 0.1


@pytest.mark.slow
def test_live_timing_reports_the_error_against_a_dense_jacobian(minilm: tuple) -> None:
    """The live timing's largest error is that of the default call against the dense float64 Jacobian's norm
    (computed here independently), within the reference's own accuracy; times are positive."""
    model, tokenizer = minilm
    torch.set_num_threads(1)
    (timing,) = live_benchmark.live_speedup(model, tokenizer, 2, lengths=(5,), per_length=2, repeats=1)
    assert timing.n == 5 and timing.inputs == 2 and timing.paper_cpu_s > 0 and timing.lipnb_cpu_s > 0
    assert timing.speedup == pytest.approx(timing.paper_cpu_s / timing.lipnb_cpu_s)
    f = models.attention_map(model, 2, "self")
    X = models.attention_inputs(model, 2, _ids(tokenizer, 5, 2), kind="self")
    f64 = models.attention_map(copy.deepcopy(model).double(), 2, "self")
    dense = exact_local_lipschitz(lambda Z: f64(Z), X.double())
    values = lipnb.local_lipschitz(f, X).double()
    assert timing.max_rel_error == pytest.approx(float(((values - dense) / dense).abs().max()), abs=1e-9)
    assert timing.max_rel_error < 1e-4
