"""Beyond the paper: 4-bit GGUF weights (SmolLM2's ``Q4_1``) applied to another model, to see what they change.

``_quantize_weight`` sends a weight matrix through ``gguf.quants``' quantize and dequantize (blocks of ``32``
consecutive entries of a row, each stored as a float16 scale and minimum and ``4``-bit codes, ``Q4_1``);
``quantized_attention`` returns a copy of a model whose self-attention projections are so rounded.
"""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["BLOCK", "attention_linears", "quantized_attention"]

BLOCK = 32


def _gguf_quants() -> object:
    if importlib.util.find_spec("gguf") is None:
        raise ImportError("quantisation needs the package gguf (pip install gguf)")
    from gguf import quants

    return quants


def _quantize_weight(weight: Tensor, qtype: str = "Q4_1") -> Tensor:
    """``weight`` ``(out, in)`` quantised to ``qtype`` by ``gguf`` and de-quantised, in its dtype and device."""
    if not isinstance(weight, Tensor) or weight.dim() != 2:
        raise ValueError(f"weight must be a 2-D tensor (out, in); got {getattr(weight, 'shape', weight)}")
    if weight.shape[1] % BLOCK:
        raise ValueError(f"weight's rows must have a multiple of {BLOCK} entries; got {weight.shape[1]}")
    quants = _gguf_quants()
    from gguf import GGMLQuantizationType

    if not hasattr(GGMLQuantizationType, qtype):
        raise ValueError(f"unknown GGUF quantisation type {qtype!r}")
    kind = getattr(GGMLQuantizationType, qtype)
    array = weight.detach().float().cpu().numpy()
    rounded = quants.dequantize(quants.quantize(array, kind), kind).astype(np.float32)
    return torch.from_numpy(rounded.reshape(array.shape)).to(weight)


def attention_linears(model: nn.Module) -> list[nn.Linear]:
    """The query, key, value and output projections of every self-attention layer (BERT or Llama)."""
    names = ("query", "key", "value", "q_proj", "k_proj", "v_proj", "o_proj")
    found = [m for name, m in model.named_modules() if isinstance(m, nn.Linear) and
             (name.rsplit(".", 1)[-1] in names or name.endswith("attention.output.dense"))]
    if not found:
        raise ValueError(f"no self-attention projections found in {type(model).__name__}")
    return found


def quantized_attention(model: nn.Module, qtype: str = "Q4_1") -> nn.Module:
    """A copy of ``model`` with every :func:`attention_linears` weight rounded by :func:`_quantize_weight`."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for linear in attention_linears(twin):
            linear.weight.copy_(_quantize_weight(linear.weight, qtype))
    return twin
