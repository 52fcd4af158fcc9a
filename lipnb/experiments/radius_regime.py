"""When Sec. 5.2's construction shows ``√n``: Lemma C.7's input on a real head scaled over radii, its fitted exponent
beside the exponent of Prop. 3.4's lower bound ``√(n-1) / (1 + (n-1) e^{-2γR²})`` over the same lengths, and the
construction repeated over random GPT-2's initialisation seeds.

Every measurement is an :func:`~lipnb.experiments.adversarial.adversarial_sweep` (cached); the fits are
:func:`~lipnb.experiments.stats.growth_fits`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from .. import models
from ..arguments import as_radius, check_index, check_lengths, check_positive_int, check_sequence
from ..core.bounds import gamma, proposition_3_4
from .adversarial import adversarial_sweep
from .stats import fit_line, growth_fits

__all__ = ["radius_scaling_table", "seed_sweep"]


def radius_scaling_table(model_name: str, layer: int, lengths: Iterable[int], radii: Sequence[float], *,
                         head: int = 0) -> pd.DataFrame:
    """Prop. 3.4's regime on a real head: for each radius ``R``, ``2γR²`` of head ``head``'s ``A``, the exponent fitted
    to ``Lip_X`` of the head alone at Lemma C.7's input of radius ``R`` (``measured``), and the least-squares exponent
    of Prop. 3.4's lower bound over the same lengths (``predicted``). Columns ``model, layer, head, R, two_gamma_r2,
    measured, predicted``."""
    models.maps.check_model_name(model_name)
    layer, lengths = check_positive_int(layer, "layer", 0), check_lengths(lengths, minimum=2)
    radii = [float(as_radius(R, "radii")) for R in check_sequence(radii, "radii")]
    model = models.load_shared(model_name)[0]
    head = check_index(head, "head", model.config.num_attention_heads)
    A = models.head_A(model, layer, head).double()
    g = float(gamma(A))
    n = torch.tensor(lengths, dtype=torch.float64)
    rows = []
    for R in radii:
        sweep = adversarial_sweep(model_name, layer, lengths, R, heads=[head], kinds=("head",))
        measured = growth_fits(sweep, ["head"]).alpha.iloc[0]
        predicted = fit_line(n.log(), proposition_3_4(A, R, n).log()).slope
        rows.append({"model": model_name, "layer": layer, "head": head, "R": R, "two_gamma_r2": 2 * g * R**2,
                     "measured": measured, "predicted": predicted})
    return pd.DataFrame(rows)


def seed_sweep(model_name: str, layer: int, lengths: Iterable[int], radii: Sequence[float],
               seeds: Sequence[int], *, head: int = 0) -> pd.DataFrame:
    """Sec. 5.2 on random GPT-2 over its initialisation seeds: :func:`adversarial_sweep` of head ``head`` (alone and
    in its layer) at each radius for the model drawn from each seed (``model_name`` for seed 0,
    ``model_name:SEED`` otherwise). The sweep's columns with ``seed``."""
    models.maps.check_model_name(model_name)
    layer, lengths = check_positive_int(layer, "layer", 0), check_lengths(lengths, minimum=2)
    seeds = check_lengths(seeds, "seeds", minimum=0)
    radii = [float(as_radius(R, "radii")) for R in check_sequence(radii, "radii")]
    parts = [adversarial_sweep(model_name if s == 0 else f"{model_name}:{s}", layer, lengths, R,
                               heads=[head]).frame.assign(seed=s)
             for s in seeds for R in radii]
    return pd.concat(parts, ignore_index=True)
