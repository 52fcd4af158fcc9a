"""App. E.2's question on real text: does the growth of ``Lip_X`` with ``n`` come from token magnitudes? The exponents
in ``n`` of ``Lip_X``, of the token radius ``R_X``, of the largest token norm and of ``Lip_X / R_X²``, per group of a
real-text sweep's table (:func:`~lipnb.experiments.real_text.real_text_sweep`).

A least-squares slope is linear in the data, so ``α(Lip/R²) = α(Lip) - 2 α(R)`` holds exactly: dividing by ``R_X²``
restates the radius exponent; it does not test a cause.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ..arguments import check_grouped_table, check_positive_int
from .stats import growth_fits

__all__ = ["MAGNITUDES", "magnitude_exponents"]

# The quantities fitted, each with the column of a real-text sweep it is read from (``None``: ``lip / radius²``).
MAGNITUDES: dict[str, str | None] = {"Lip": "lip", "R": "radius", "max norm": "max_norm", "Lip/R²": None}


def magnitude_exponents(table: pd.DataFrame, by: Sequence[str] = ("dataset", "layer"), *,
                        resamples: int = 2000) -> pd.DataFrame:
    """App. E.2: the exponent in ``n`` of each of :data:`MAGNITUDES` per group of ``by``, with its bootstrap interval
    (windows resampled within each length, ``resamples`` times). Indexed by ``by`` and ``quantity``; columns
    ``alpha, low, high``."""
    frame, by = check_grouped_table(table, by, ("n", "lip", "radius", "max_norm"))
    resamples = check_positive_int(resamples, "resamples")
    frame = frame.assign(normalised=frame.lip / frame.radius**2)
    fits = pd.concat(growth_fits(frame, by, y=column or "normalised", resamples=resamples).assign(quantity=quantity)
                     for quantity, column in MAGNITUDES.items())
    order = fits.quantity.map(list(MAGNITUDES).index)
    fits = fits.assign(order=order).sort_values([*by, "order"])
    return fits.set_index([*by, "quantity"])[["alpha", "low", "high"]]
