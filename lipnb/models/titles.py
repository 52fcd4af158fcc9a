"""Each model as a reader names it: the id a call takes is for code, never for a table, a legend or a sentence."""

from __future__ import annotations

from .loading import check_model_name

__all__ = ["model_title"]

_TITLES = {"minilm": "MiniLM", "minilm-decoder": "MiniLM decoder", "gpt2-random": "random GPT-2",
           "bert-base-uncased": "BERT base", "bert-base-uncased-decoder": "BERT base decoder", "gpt2": "GPT-2",
           "smollm2": "SmolLM2", "llama-random": "random Llama", "llama-random-norope": "random Llama without RoPE"}


def model_title(name: str) -> str:
    """The model ``name`` as a reader names it ("gpt2-random" → "random GPT-2", "gpt2-random:3" → "random
    GPT-2, seed 3"), for tables and legends."""
    name = check_model_name(name)
    base, _, seed = name.partition(":")
    return _TITLES[base] + (f", seed {seed}" if seed else "")
