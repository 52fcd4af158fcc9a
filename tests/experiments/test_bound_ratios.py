"""lipnb.experiments.bound_ratios: Theorem E.3 summed over heads against the measured constants of a real-text
sweep."""

from __future__ import annotations

import pytest
import torch

from lipnb import data, models
from lipnb.core import exact_local_lipschitz, theorem_e_3
from lipnb.experiments.bound_ratios import e3_bound_ratios
from lipnb.experiments.real_text import real_text_sweep


@pytest.mark.slow
def test_e3_bound_ratios_hold_against_a_dense_jacobian(alice: None) -> None:
    """Theorem E.3 summed over heads bounds the measured constant; the bound recomputed head by head (with the
    output projection's norms, Lemma 3.8) and the dense float64 constant confirm both ends of the ratio."""
    sweep = real_text_sweep("minilm", "alice", [4], 1, layers=[0]).frame
    ratios = e3_bound_ratios(sweep)
    assert list(ratios.columns) == ["model", "layer", "n", "bound", "ratio"] and len(ratios) == 1
    model, tokenizer = models.load("minilm")
    heads = models.head_matrices(model, 0).to(torch.float64)
    ids = data.token_sequences(data.alice_text(), tokenizer, [4], 1)[4]
    X = models.attention_inputs(model.double(), 0, ids)
    R = float(X.norm(dim=-1).max())
    by_head = sum(float(torch.linalg.matrix_norm(heads.W[h], ord=2))
                  * float(theorem_e_3(heads.A[h], heads.V[h], R, 4, heads.score_bias[h]))
                  for h in range(heads.num_heads))
    assert ratios.bound.item() == pytest.approx(by_head, rel=1e-6)
    exact = float(exact_local_lipschitz(models.attention_map(model, 0), X))
    assert ratios.bound.item() > exact
    assert ratios.ratio.item() == pytest.approx(ratios.bound.item() / exact, rel=1e-3)
