"""Q4_1 through gguf: the rounding error bound of the format, idempotence, and the copy of a model."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lipnb.models import quantization

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="needs gguf")


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(1e-3, 1e3))
def test_q4_1_error_is_at_most_half_a_step(seed: int, scale: float) -> None:
    """Q4_1 maps a block to min + q (max - min)/15, q = 0..15 (scale and min in float16): the error is at most
    half a step plus the float16 rounding of the scale (times 15) and of the minimum."""
    W = scale * torch.randn(3, 64, generator=torch.Generator().manual_seed(seed))
    Wq = quantization._quantize_weight(W)
    blocks, qblocks = W.view(-1, 32), Wq.view(-1, 32)
    lo, hi = blocks.min(1, keepdim=True).values, blocks.max(1, keepdim=True).values
    step = (hi - lo) / 15
    slack = 2.0**-10 * (15 * step + lo.abs()) + 1e-6 * scale
    assert bool(((blocks - qblocks).abs() <= step / 2 + slack).all())
    torch.testing.assert_close(quantization._quantize_weight(Wq), Wq, rtol=1e-3, atol=1e-3 * scale)


def test_quantized_attention_copies_and_rounds_only_the_projections() -> None:
    layer = torch.nn.TransformerEncoderLayer(64, 2, batch_first=True)
    with pytest.raises(ValueError, match="projections"):
        quantization.quantized_attention(layer)
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
    twin = quantization.quantized_attention(bert)
    assert len(quantization.attention_linears(bert)) == 4
    q, q2 = bert.encoder.layer[0].attention.self.query.weight, twin.encoder.layer[0].attention.self.query.weight
    assert (q - q2).abs().max() > 0
    mlp, mlp2 = bert.encoder.layer[0].intermediate.dense.weight, twin.encoder.layer[0].intermediate.dense.weight
    torch.testing.assert_close(mlp2, mlp, rtol=0, atol=0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        quantization._quantize_weight(torch.zeros(2, 33))
    with pytest.raises(ValueError, match="2-D"):
        quantization._quantize_weight(torch.zeros(32))
    with pytest.raises(ValueError, match="Q9"):
        quantization._quantize_weight(torch.zeros(2, 32), "Q9")
