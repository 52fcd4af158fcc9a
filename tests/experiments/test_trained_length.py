"""A BERT model past its fine-tuning length (:mod:`lipnb.experiments.trained_length`), against independent
computations: the attention weights the Hugging Face model returns itself, a dense float64 Jacobian's SVD, numpy's
medians."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from lipnb import models
from lipnb.core import jacobian_matrix
from lipnb.experiments.trained_length import aliasing_test, median_difference_interval, split_attention


def _tiny_bert(positions: int = 16) -> BertModel:
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=positions, attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return BertModel(config, add_pooling_layer=False).eval().requires_grad_(False)


def test_median_difference_interval_covers_the_shift() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(400, generator=g, dtype=torch.float64)
    b = torch.randn(300, generator=g, dtype=torch.float64) + 0.5
    difference, low, high = median_difference_interval(a, b)
    assert difference == pytest.approx(np.median(a.numpy()) - np.median(b.numpy()))
    assert low < -0.5 < high and low < difference < high and high - low < 0.6
    with pytest.raises(ValueError, match="two values"):
        median_difference_interval(a[:1], b)


def test_aliasing_test_finds_copied_positions_and_not_random_ones() -> None:
    """Untuned positions set to copies of tuned positions far away alias by construction; random ones do not."""
    model = _tiny_bert(32)
    weight = model.embeddings.position_embeddings.weight
    copied = copy.deepcopy(model)
    copied.embeddings.position_embeddings.weight[16:] = weight[:16]
    aliased = aliasing_test(copied, 16, gap=2)
    assert aliased.untuned_median == pytest.approx(1.0) and aliased.low > 0
    random = aliasing_test(model, 16, gap=2)
    assert random.low < 0 < random.high and random.tuned_iqr > 0


def test_split_attention_against_the_models_own_weights_and_a_dense_svd() -> None:
    model = _tiny_bert()
    sa = model.encoder.layer[0].attention.self
    sa.query.weight.mul_(20)                                             # scores of order one: weights that split
    sa.key.weight.mul_(20)
    ids = torch.randint(40, (3, 5), generator=torch.Generator().manual_seed(1))
    found = split_attention(model, 0, ids, threshold=0.3, gap=1, trained=3)
    P = model(ids, output_attentions=True).attentions[0].double()        # (B, H, n, n), Hugging Face's own
    top = P.topk(2, dim=-1)
    split = (top.values[..., 1] > 0.3) & ((top.indices[..., 0] - top.indices[..., 1]).abs() > 1)
    assert found.pairs == int(split.sum()) > 0
    assert found.past_trained == int((split & (top.indices.amax(-1) >= 3)).sum())
    involved = torch.zeros(3, 5, dtype=torch.bool)
    for b, h, i in torch.nonzero(split).tolist():
        involved[b, [i, *top.indices[b, h, i].tolist()]] = True
    assert found.token_share == pytest.approx(float(involved.double().mean()))
    double = copy.deepcopy(model).double()
    X = models.attention_inputs(double, 0, ids)
    right = torch.linalg.svd(jacobian_matrix(models.attention_map(double, 0), X)).Vh[:, 0]   # (B, n d)
    weight = right.view(3, 5, 16).square().sum(-1)
    assert found.direction_share == pytest.approx(float((weight * involved).sum(1).mean()), abs=1e-3)
