"""Q4_1 rounding measured on MiniLM (:mod:`lipnb.experiments.rounding`), against the projections of the rounded model
(:func:`lipnb.models.quantized_attention`), the dense eigenvalues of ``A_h`` and dense float64 Jacobians."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lipnb import data, exact_local_lipschitz, models
from lipnb.experiments.rounding import q4_1_effect, q4_1_heads


@pytest.fixture(autouse=True)
def every_test_reads_alice(alice: None) -> None:
    """The pre-seeded Alice text and an empty results cache (``alice`` of tests/conftest.py)."""


def _gamma(A: torch.Tensor) -> float:
    values = np.linalg.eigvals(A.double().numpy())
    real = values.real[np.abs(values.imag) <= 1e-9 * np.abs(values).max()]
    return max(real.max() / 8, -real.min())


def test_q4_1_heads_against_the_rounded_models_heads() -> None:
    table = q4_1_heads("minilm").frame
    model = models.load("minilm")[0].double()
    assert len(table) == 6 * 12 and table.weight_error.nunique() == 1
    sa = model.encoder.layer[2].attention.self
    rounded = models.quantized_attention(model).encoder.layer[2].attention.self
    k = sa.attention_head_size
    for h in (0, 7):
        rows = table[(table.layer == 2) & (table["head"] == h)]
        Q, K = sa.query.weight[h * k:(h + 1) * k], sa.key.weight[h * k:(h + 1) * k]
        assert rows.gamma_before.iloc[0] == pytest.approx(_gamma(K.T @ Q * sa.scaling), rel=1e-7)
        Qr, Kr = (W[h * k:(h + 1) * k] for W in (rounded.query.weight, rounded.key.weight))
        assert rows.gamma_after.iloc[0] == pytest.approx(_gamma(Kr.T @ Qr * sa.scaling), rel=1e-7)
    W = sa.value.weight
    assert table.weight_error.iloc[0] >= float((rounded.value.weight - W).norm() / W.norm()) > 0.01


def test_q4_1_effect_against_dense_jacobians() -> None:
    table = q4_1_effect("minilm", (4, 6), 1).frame
    assert len(table) == 6 * 2 and (table.after != table.before).all()
    model, tokenizer = models.load("minilm")
    model = model.double()
    rounded = models.quantized_attention(model)
    window = data.token_sequences(data.alice_text(), tokenizer, (4, 6), 1)[4]
    X = models.attention_inputs(model, [0, 5], window)
    for layer in (0, 5):
        row = table[(table.layer == layer) & (table.n == 4)].iloc[0]
        for column, m in (("before", model), ("after", rounded)):
            exact = exact_local_lipschitz(models.attention_map(m, layer), X[layer])
            assert row[column] == pytest.approx(float(exact[0]), rel=1e-6)
