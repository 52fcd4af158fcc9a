"""A BERT-family model past the length its checkpoint was fine-tuned on (chapter *Real text: how fast does the
constant grow?*): whether its untuned position embeddings resemble distant tuned ones (:func:`aliasing_test`), and
where its attention splits between distant keys and how much the direction of fastest change weighs those tokens
(:func:`split_attention`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import models
from ..arguments import check_positive_int
from ..core.attention import attention_matrix
from ..core.lipschitz import local_lipschitz
from .real_text import position_aliasing

__all__ = ["AliasingTest", "SplitAttention", "aliasing_test", "median_difference_interval", "split_attention"]


def median_difference_interval(a: Tensor, b: Tensor, *, level: float = 0.95, resamples: int = 2000,
                               seed: int = 0) -> tuple[float, float, float]:
    """``median(a) - median(b)`` (the median of an even count: the mean of the middle two) and its percentile
    bootstrap interval at ``level`` (each sample resampled on its own, ``resamples`` times, from ``seed``):
    ``(difference, low, high)``."""
    a, b = torch.as_tensor(a, dtype=torch.float64).flatten(), torch.as_tensor(b, dtype=torch.float64).flatten()
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"median_difference_interval: each sample needs two values at least; got {len(a)}, {len(b)}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level}")
    resamples = check_positive_int(resamples, "resamples")
    g = torch.Generator().manual_seed(seed)
    pick_a = torch.randint(len(a), (resamples, len(a)), generator=g)
    pick_b = torch.randint(len(b), (resamples, len(b)), generator=g)
    diffs = a[pick_a].quantile(0.5, dim=1) - b[pick_b].quantile(0.5, dim=1)
    low, high = torch.quantile(diffs, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(a.quantile(0.5) - b.quantile(0.5)), float(low), float(high)


@dataclass(frozen=True)
class AliasingTest:
    """Do untuned positions resemble distant tuned ones more than tuned ones do? The median largest cosine to a
    distant tuned position of each kind, the bootstrap interval on their difference, the tuned positions' spread."""

    untuned_median: float
    tuned_median: float
    low: float
    high: float
    tuned_iqr: float


def aliasing_test(model: nn.Module, trained: int, *, gap: int, resamples: int = 2000, seed: int = 0) -> AliasingTest:
    """For every position from ``trained // 2`` on, the largest cosine between its embedding and a tuned position
    (below ``trained``) more than ``gap`` positions away (:func:`~lipnb.experiments.real_text.position_aliasing`);
    untuned positions (``>= trained``) against tuned ones: medians, the interval on their difference
    (:func:`median_difference_interval`) and the interquartile range among tuned positions."""
    trained = check_positive_int(trained, "trained", 2)
    aliases = position_aliasing(model, trained, start=trained // 2, gap=gap)
    tuned = torch.tensor(aliases[aliases.tuned].cosine.to_numpy())
    untuned = torch.tensor(aliases[~aliases.tuned].cosine.to_numpy())
    _, low, high = median_difference_interval(untuned, tuned, resamples=resamples, seed=seed)
    iqr = float(tuned.quantile(0.75) - tuned.quantile(0.25))
    return AliasingTest(float(untuned.quantile(0.5)), float(tuned.quantile(0.5)), low, high, iqr)


@dataclass(frozen=True)
class SplitAttention:
    """Layer ``layer`` on windows of one length: the (head, query) pairs that split their attention between two
    distant keys, those with a key past the trained length, and the share of the direction of fastest change that
    falls on the split pairs' tokens against those tokens' share of all tokens."""

    pairs: int
    past_trained: int
    direction_share: float
    token_share: float


def split_attention(model: nn.Module, layer: int, input_ids: Tensor, *, threshold: float, gap: int,
                    trained: int) -> SplitAttention:
    """Where ``layer``'s attention (Def 2.2's weights with the score biases, from :func:`lipnb.models.head_matrices`)
    splits on the windows ``input_ids`` ``(B, n)``: a (head, query) pair splits when its second largest weight exceeds
    ``threshold`` and its two largest keys are more than ``gap`` positions apart; ``past_trained`` counts the pairs
    with a key at position ``trained`` or later. ``direction_share`` is the mean over windows of the squared weight
    that the top right singular vector of ``D_X f`` (``f`` the layer's ``"mha"`` map, Lanczos to relative residual
    ``1e-4``) puts on the split pairs' tokens (queries and both keys), ``token_share`` those tokens' share of all."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold must be in (0, 1); got {threshold}")
    gap, trained = check_positive_int(gap, "gap", 0), check_positive_int(trained, "trained")
    X = models.attention_inputs(model, layer, input_ids)
    heads = models.head_matrices(model, layer)
    P = attention_matrix(X.double(), heads.A.double(), score_bias=heads.score_bias.double(),
                         masked=models.is_decoder(model))
    top = P.topk(2, dim=-1)
    split = (top.values[..., 1] > threshold) & ((top.indices[..., 0] - top.indices[..., 1]).abs() > gap)
    far = top.indices.amax(-1) >= trained
    involved = torch.zeros(X.shape[:2], dtype=torch.bool)
    for b, h, i in torch.nonzero(split).tolist():
        involved[b, [i, *top.indices[b, h, i].tolist()]] = True
    result = local_lipschitz(models.attention_map(model, layer), X, tol=1e-4, detailed=True)
    weight = result.right_vector.double().norm(dim=-1).square()
    weight = weight / weight.sum(1, keepdim=True)
    return SplitAttention(int(split.sum()), int((split & far).sum()),
                          float((weight * involved).sum(1).mean()), float(involved.double().mean()))
