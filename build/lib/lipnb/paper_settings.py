"""The exact settings of the paper's published scripts (``vcastin/how-smooth-is-attention``) and the maps they ran.

Every constant names the script and line it comes from. The random GPT-2 of the scripts is drawn by
``torch.manual_seed(seed)`` then ``GPT2Model(GPT2Config())``: the installed ``transformers`` draws the same
weights as the pinned 4.37.2 (``tests/test_published.py`` pins them), so those settings run here exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from . import models

__all__ = ["ADVERSARIAL_RANDOM_GPT2", "REAL_DATA_RANDOM_GPT2", "AdversarialSetting", "RealDataSetting",
           "decoder_output_tuple_map", "paper_random_gpt2", "random_gpt2_attention", "training_inputs"]

Map = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class AdversarialSetting:
    """A panel of ``adversarial_data/adversarial.py``: model seed, layer, head, ``R``, lengths, drawn C."""

    seed: int
    layer: int
    head: int
    R: float
    lengths: tuple[int, ...]
    drawn_C: float
    script: str


@dataclass(frozen=True)
class RealDataSetting:
    """The real-data run of ``gpt2_random/process_gpt_random.py`` and ``compute_gpt_random.py``."""

    seed: int
    layer: int
    lengths: tuple[int, ...]
    per_length: int
    script: str


# adversarial.py l.60 seed, l.62 model, l.66-70 layer/R/lengths/head, l.89 `cst = 0.92` of the drawn C n^(1/2).
ADVERSARIAL_RANDOM_GPT2 = AdversarialSetting(seed=320, layer=6, head=0, R=100.0, lengths=tuple(range(2, 100, 5)),
                                             drawn_C=0.92, script="adversarial_data/toolbox.py")
# process_gpt_random.py l.11 seed, l.16 model (never .eval()), l.26 layer, l.101/104 lengths and batch.
REAL_DATA_RANDOM_GPT2 = RealDataSetting(seed=0, layer=6, lengths=tuple(range(2, 100, 2)), per_length=10,
                                        script="gpt2_random/compute_gpt_random.py")


def paper_random_gpt2(seed: int, attn_implementation: str = "eager") -> nn.Module:
    """``torch.manual_seed(seed); GPT2Model(GPT2Config())`` as the scripts draw it, left in training mode as they
    leave it (frozen parameters); the global RNG is left untouched."""
    from transformers import GPT2Config, GPT2Model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2Model(GPT2Config(attn_implementation=attn_implementation))
    return model.requires_grad_(False)


def _causal(X: Tensor) -> Tensor:
    """Additive causal mask ``(1, 1, n, n)``: the ``self.bias`` buffer GPT2Attention applied itself in 4.37.2."""
    n = X.shape[1]
    return torch.full((n, n), torch.finfo(X.dtype).min, dtype=X.dtype, device=X.device).triu(1)[None, None]


def random_gpt2_attention(model: nn.Module, layer: int) -> Map:
    """``GPT2Attention(X)[0]`` as the scripts called it under 4.37.2: causal (its own buffer then, passed here),
    in whatever mode the model is (training mode: dropout drawn afresh at every call)."""
    attn = model.h[layer].attn
    return lambda X: attn(X, attention_mask=_causal(X))[0]


def training_inputs(model: nn.Module, layer: int, input_ids: Tensor) -> Tensor:
    """The input of block ``layer``'s attention (``ln_1`` output) in a forward in the model's current mode, as the
    published forward hook captured it (training mode: dropout in the embeddings and earlier blocks)."""
    return models.capture_inputs(model, input_ids, {layer: model.h[layer].attn})[layer]


def decoder_output_tuple_map(model: nn.Module, layer: int) -> Map:
    """What ``loc_lipschitz`` differentiated in the BERT-decoder adversarial panel: ``BertSelfAttention``'s whole
    output under 4.37.2 (``modeling_bert.py`` l.322, l.373-374), ``(context, (key, value))``, unmasked, as one
    ``(B, 3n, d)`` tensor (context, then the key and value projections token by token)."""
    if models.family(model) != "bert" or not models.is_decoder(model):
        raise TypeError("decoder_output_tuple_map needs a BERT decoder (is_decoder=True)")
    sa = models.layer_module(model, layer).attention.self

    def fn(X: Tensor) -> Tensor:
        return torch.cat([sa(X)[0], sa.key(X), sa.value(X)], dim=1)

    return fn
