"""App. E.2's exponents (:mod:`lipnb.experiments.magnitudes`): the identity of the normalised exponent and the slopes
against numpy's polyfit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lipnb.experiments.magnitudes import MAGNITUDES, magnitude_exponents


def test_magnitude_exponents_are_least_squares_slopes_and_satisfy_the_identity() -> None:
    rng = np.random.default_rng(0)
    n = np.repeat([4.0, 8, 16, 32, 64], 3)
    rows = []
    for layer, (a, b) in enumerate(((0.6, 0.05), (0.3, 0.0))):
        noise = np.exp(0.02 * rng.standard_normal((3, len(n))))
        rows.append(pd.DataFrame({"dataset": "alice", "layer": layer, "n": n, "lip": 2 * n**a * noise[0],
                                  "radius": 3 * n**b * noise[1], "max_norm": 4 * n**b * noise[2]}))
    table = pd.concat(rows, ignore_index=True)
    fits = magnitude_exponents(table, resamples=200)
    assert list(fits.index.get_level_values("quantity")[:4]) == list(MAGNITUDES)
    for layer, rows in table.groupby("layer"):
        for quantity, column in (("Lip", "lip"), ("R", "radius"), ("max norm", "max_norm")):
            slope = np.polyfit(np.log(rows.n), np.log(rows[column]), 1)[0]
            alpha, low, high = fits.loc[("alice", layer, quantity)]
            assert alpha == pytest.approx(slope, rel=1e-10) and low <= alpha <= high
        identity = fits.loc[("alice", layer, "Lip"), "alpha"] - 2 * fits.loc[("alice", layer, "R"), "alpha"]
        assert fits.loc[("alice", layer, "Lip/R²"), "alpha"] == pytest.approx(identity, rel=1e-10)
    with pytest.raises(ValueError, match="max_norm"):
        magnitude_exponents(table.drop(columns="max_norm"))
