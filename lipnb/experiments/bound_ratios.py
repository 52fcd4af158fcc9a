"""App. E.3 on real text: Theorem E.3's bound with the layer's biases, summed over heads by Lemma 3.8, against the
local constants a real-text sweep measured (chapter *Real text: how fast does the constant grow?*)."""

from __future__ import annotations

import pandas as pd
import torch

from .. import models
from ..arguments import check_grouped_table
from ..core.bounds import multihead_bound
from ..results import ResultTable

__all__ = ["e3_bound_ratios"]


def e3_bound_ratios(table: pd.DataFrame | ResultTable) -> pd.DataFrame:
    """Every row of a real-text sweep of Def 2.2's map (columns ``model, layer, n, max_norm, lip``): Theorem E.3's
    bound for each head at the input's largest token norm and length, summed by Lemma 3.8 (the layer's heads and
    biases, float64), divided by the measured constant. Columns ``model, layer, n, bound, ratio``."""
    frame, _ = check_grouped_table(table, ["model", "layer"], ("n", "max_norm", "lip"))
    parts = []
    for (name, layer), rows in frame.groupby(["model", "layer"], sort=True):
        heads = models.head_matrices(models.load_shared(name)[0], int(layer)).to(torch.float64)
        bound = multihead_bound(heads, torch.tensor(rows.max_norm.to_numpy()), torch.tensor(rows.n.to_numpy()))
        parts.append(pd.DataFrame({"model": name, "layer": int(layer), "n": rows.n.to_numpy(),
                                   "bound": bound.numpy(), "ratio": bound.numpy() / rows.lip.to_numpy()}))
    return pd.concat(parts, ignore_index=True)
