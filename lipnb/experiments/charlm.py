"""Character-level language models with dot-product, L2 and contractive L2 attention (Kim et al., 2021, Sec. 5).

The paper trained character-level Transformers on Penn Treebank; the book trains them on AG_NEWS's text
(:mod:`lipnb.experiments.charlm_runs`). Every model has the same size: pre-LayerNorm blocks ``x + MHA(LN x)``,
``x + MLP(LN x)``, causal masks; only the attention changes. ``"l2"`` is tied L2 attention (Sec. 3),
``"l2-contractive"`` divides its output by the 2-norm bound of Theorem 3.2 (sharpened) when it exceeds 1,
so that every attention branch is 1-Lipschitz in the unmasked case.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from ..arguments import (
    check_bool,
    check_choice,
    check_device,
    check_ids,
    check_level,
    check_positive_int,
    check_real,
    check_seed,
)
from ..core.attention import mask_future
from ..core.l2_bounds import phi_inverse

__all__ = [
    "CharLM",
    "CharLMConfig",
    "Kind",
    "char_corpus",
    "kind_title",
    "ngram_bits_per_char",
    "train_char_lm",
]

Kind = Literal["dot", "l2", "l2-contractive"]
# Each attention as the prose names it (Kim et al., 2021, Sec. 3 and 5.3).
_KIND_TITLES: dict[str, str] = {"dot": "dot-product", "l2": "tied L2", "l2-contractive": "contractive L2"}


def kind_title(kind: Kind, *, in_table: bool = False) -> str:
    """The attention ``kind`` in words ("tied L2"); ``in_table``: with a non-breaking hyphen and spaces, so that a
    table's narrow column never breaks inside the name."""
    title = _KIND_TITLES[check_choice(kind, "kind", _KIND_TITLES)]
    return title.replace("-", "\u2011").replace(" ", "\u00a0") if check_bool(in_table, "in_table") else title


@dataclass(frozen=True)
class CharLMConfig:
    """Model and training sizes: width ``d``, ``heads``, ``depth`` blocks, ``context`` characters, ``steps`` of Adam."""

    d: int = 32
    heads: int = 2
    depth: int = 2
    context: int = 32
    batch: int = 32
    steps: int = 150
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self) -> None:
        """Every size a positive int (``heads`` dividing ``d``), ``lr`` a positive number, ``seed`` a seed."""
        for field in ("d", "heads", "depth", "context", "batch", "steps"):
            check_positive_int(getattr(self, field), field)
        if self.d % self.heads:
            raise ValueError(f"heads = {self.heads} must divide d = {self.d}")
        if check_real(self.lr, "lr") <= 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")
        check_seed(self.seed)


class _Attention(nn.Module):
    """Causal multi-head attention of one ``kind``: ``"dot"``, ``"l2"`` (tied ``W^K = W^Q``) or ``"l2-contractive"``."""

    def __init__(self, d: int, heads: int, kind: Kind) -> None:
        super().__init__()
        if kind not in ("dot", "l2", "l2-contractive"):
            raise ValueError(f"kind must be 'dot', 'l2' or 'l2-contractive'; got {kind!r}")
        d, heads = check_positive_int(d, "d"), check_positive_int(heads, "heads")
        if d % heads:
            raise ValueError(f"heads = {heads} must divide d = {d}")
        self.kind, self.H, self.k = kind, heads, d // heads
        self.Q = nn.Parameter(torch.randn(heads, d, self.k) / math.sqrt(d))
        self.K = nn.Parameter(torch.randn(heads, d, self.k) / math.sqrt(d)) if kind == "dot" else None
        self.V = nn.Parameter(torch.randn(heads, d, self.k) / math.sqrt(d))
        self.O = nn.Parameter(torch.randn(d, d) / math.sqrt(d))

    def forward(self, X: Tensor) -> Tensor:
        n, tau = X.shape[1], math.sqrt(self.k)
        Xh = X.unsqueeze(1)
        q = Xh @ self.Q
        if self.kind == "dot":
            S = q @ (Xh @ self.K).mT / tau
            v = Xh @ self.V
        else:
            S = (2 * q @ q.mT - q.square().sum(-1).unsqueeze(-2)) / tau
            v = Xh @ (self.Q @ (self.Q.mT @ self.V)) / tau
        P = torch.softmax(mask_future(S), dim=-1)
        out = (P @ v).transpose(1, 2).reshape(X.shape[0], n, -1) @ self.O
        if self.kind == "l2-contractive":
            out = out / self.bound(n).clamp_min(1.0)
        return out

    def bound(self, n: int) -> Tensor:
        """Theorem 3.2's 2-norm bound (constant ``2√2``) of the unmasked map at length ``n``, differentiable."""
        Qn = torch.linalg.matrix_norm(self.Q, ord=2)
        Vn = torch.linalg.matrix_norm(self.V, ord=2)
        weights = (Qn.pow(4) * Vn.square()).sum().sqrt() * torch.linalg.matrix_norm(self.O, ord=2)
        lam = float(phi_inverse(n - 1))
        return math.sqrt(n) / math.sqrt(self.k) * (2 * math.sqrt(2) * lam + 1) * weights


class CharLM(nn.Module):
    """A pre-LayerNorm character Transformer whose attention is of one ``kind``."""

    def __init__(self, vocab: int, config: CharLMConfig, kind: Kind) -> None:
        super().__init__()
        d = config.d
        self.embed = nn.Embedding(vocab, d)
        self.position = nn.Parameter(torch.randn(config.context, d) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(config.depth):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(d), "attn": _Attention(d, config.heads, kind),
                "ln2": nn.LayerNorm(d), "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
            }))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids) + self.position[: ids.shape[1]]
        for b in self.blocks:
            x = x + b["attn"](b["ln1"](x))
            x = x + b["mlp"](b["ln2"](x))
        return self.head(self.ln(x))


def char_corpus(text: str, *, valid_fraction: float = 0.1) -> tuple[Tensor, Tensor, list[str]]:
    """Character ids of ``text``: training and validation splits (the last ``valid_fraction``) and the alphabet."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string; got {type(text).__name__}")
    check_level(valid_fraction, "valid_fraction")
    alphabet = sorted(set(text))
    index = {ch: i for i, ch in enumerate(alphabet)}
    ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    cut = int(len(ids) * (1 - valid_fraction))
    return ids[:cut], ids[cut:], alphabet


def ngram_bits_per_char(train: Tensor, valid: Tensor, vocab: int, order: int) -> float:
    """The count-based baseline: validation bits/char of an ``order``-gram model (``order - 1`` characters of
    context; 1 is the unigram) fitted on ``train`` with add-one smoothing."""
    order = check_positive_int(order, "order")
    vocab = check_positive_int(vocab, "vocab")
    train, valid = check_ids(train, vocab, "train"), check_ids(valid, vocab, "valid")
    if train.dim() != 1 or valid.dim() != 1 or len(train) < order or len(valid) < order:
        raise ValueError(f"train and valid must be 1-D with at least order = {order} characters")
    counts = torch.ones((vocab,) * order, dtype=torch.float64)
    counts.index_put_(tuple(train[i:len(train) - order + 1 + i] for i in range(order)),
                      torch.ones(len(train) - order + 1, dtype=torch.float64), accumulate=True)
    probs = counts / counts.sum(-1, keepdim=True)
    windows = tuple(valid[i:len(valid) - order + 1 + i] for i in range(order))
    return float(-probs[windows].log2().mean())


def _batch(ids: Tensor, config: CharLMConfig, g: torch.Generator) -> tuple[Tensor, Tensor]:
    start = torch.randint(0, len(ids) - config.context - 1, (config.batch,), generator=g)
    rows = start[:, None] + torch.arange(config.context + 1)
    chunk = ids[rows]
    return chunk[:, :-1], chunk[:, 1:]


def _bits_per_char(model: CharLM, ids: Tensor, config: CharLMConfig, device: torch.device) -> float:
    """Validation bits per character over consecutive non-overlapping windows (all of ``ids``, minus a tail)."""
    usable = (len(ids) - 1) // config.context * config.context
    x = ids[:usable].view(-1, config.context).to(device)
    y = ids[1: usable + 1].view(-1, config.context).to(device)
    with torch.no_grad():
        total = sum(nn.functional.cross_entropy(model(xb).flatten(0, 1), yb.flatten(), reduction="sum").item()
                    for xb, yb in zip(x.split(256), y.split(256), strict=True))
    return total / y.numel() / math.log(2)


def train_char_lm(train: Tensor, valid: Tensor, vocab: int, config: CharLMConfig, kind: Kind, *,
                  device: torch.device | None = None, log_every: int = 10, divisors: bool = False) -> list[dict]:
    """Train one model with Adam; rows ``{step, train_bpc, valid_bpc, diverged, seconds}`` every ``log_every`` steps.

    With ``divisors``, each row also holds ``divisor``: every block's ``max(1, bound)`` at the context length, what
    a contractive block divides its attention by (Theorem 3.2's bound; step 0's row is the initial model).

    ``train_bpc`` averages the training loss since the previous row, ``valid_bpc`` is measured on all of
    ``valid``; a non-finite loss stops the run, with a last row marked ``diverged`` whose losses are ``inf``
    (finite numbers only, so that the cached CSV keeps numeric columns). Arguments are checked before any work:
    ``train`` must hold more than ``context + 1`` ids (a batch of windows and their next characters), ``valid`` at
    least ``context + 1``.
    """
    vocab = check_positive_int(vocab, "vocab")
    train, valid = check_ids(train, vocab, "train"), check_ids(valid, vocab, "valid")
    if not isinstance(config, CharLMConfig):
        raise TypeError(f"config must be a CharLMConfig; got {type(config).__name__}")
    for ids, name, least in ((train, "train", config.context + 2), (valid, "valid", config.context + 1)):
        if ids.dim() != 1 or len(ids) < least:
            raise ValueError(f"{name} must be a 1-D text of at least {least} characters for context = "
                             f"{config.context}; got shape {tuple(ids.shape)}")
    check_choice(kind, "kind", ("dot", "l2", "l2-contractive"))
    log_every, divisors = check_positive_int(log_every, "log_every"), check_bool(divisors, "divisors")
    device = torch.device("cpu") if device is None else check_device(device)
    # the model's initialisation draws from torch's global generator: seeded here, the caller's state kept
    cuda = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        return _train(train, valid, vocab, config, kind, device, log_every, divisors)


def _train(train: Tensor, valid: Tensor, vocab: int, config: CharLMConfig, kind: Kind, device: torch.device,
           log_every: int, divisors: bool) -> list[dict]:
    """:func:`train_char_lm`'s loop, run inside a fork of torch's random state."""
    torch.manual_seed(config.seed)
    g = torch.Generator().manual_seed(config.seed)
    model = CharLM(vocab, config, kind).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    rows, start, running = [], time.perf_counter(), []

    def divisor() -> list[float]:
        with torch.no_grad():
            return [float(b["attn"].bound(config.context).clamp_min(1.0)) for b in model.blocks]

    if divisors:
        rows.append({"step": 0, "divisor": divisor()})
    for step in range(1, config.steps + 1):
        x, y = _batch(train, config, g)
        loss = nn.functional.cross_entropy(model(x.to(device)).flatten(0, 1), y.to(device).flatten())
        if not bool(torch.isfinite(loss)):
            rows.append({"step": step, "train_bpc": math.inf, "valid_bpc": math.inf, "diverged": True,
                         "seconds": time.perf_counter() - start})
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running.append(loss.item() / math.log(2))
        if step % log_every == 0 or step == config.steps:
            rows.append({"step": step, "train_bpc": sum(running) / len(running),
                         "valid_bpc": _bits_per_char(model, valid, config, device), "diverged": False,
                         "seconds": time.perf_counter() - start})
            if divisors:
                rows[-1]["divisor"] = divisor()
            running = []
    return rows
