"""The certificate audit (:mod:`lipnb.experiments.certificate`): its generators give the spectra they promise, its
counts count what they say (planted results), and a sample of the audit finds nothing the mathematics forbids."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given

from lipnb import jacobian_matrix, local_lipschitz
from lipnb.experiments import certificate
from lipnb.experiments.certificate import (
    BATCH,
    Problem,
    certificate_audit,
    certificate_counts,
    cluster_width,
    crossing,
    map_rounding,
    prescribed_spectrum,
    saturated_attention,
    spectrum,
    starts,
)
from lipnb.results import ResultTable

F64 = torch.float64
KINDS = ["gap-1e-2", "gap-1e-5", "gap-1e-8", "repeated", "second"]


def dense_singular(problem: Problem) -> torch.Tensor:
    return torch.linalg.svdvals(jacobian_matrix(problem.fn, problem.X.double()))


@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 10_000), linear=st.booleans())
def test_prescribed_spectrum_has_exactly_the_prescribed_singular_values(kind: str, seed: int, linear: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    n, d = 3, 4
    spectra = spectrum(kind, n * d, g) if linear else torch.stack([spectrum(kind, n * d, g) for _ in range(BATCH)])
    problem = prescribed_spectrum(spectra, n, d, seed=seed, linear=linear)
    expected = spectra.expand(BATCH, n * d).sort(dim=1, descending=True).values
    assert torch.allclose(dense_singular(problem), expected, rtol=0, atol=1e-13)
    assert torch.allclose(problem.singular, expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("kind,top", [("gap-1e-4", [1, 1 - 1e-4, 1 - 2e-4]), ("repeated", [1, 1, 1]),
                                      ("second", [1, 1 - 1e-6])])
def test_spectrum_top_is_as_named(kind: str, top: list[float]) -> None:
    s = spectrum(kind, 16, torch.Generator().manual_seed(0))
    assert s[: len(top)].tolist() == pytest.approx(top, abs=1e-15)
    assert bool((s[len(top):] <= 0.9).all()) and bool((s[:-1] >= s[1:]).all())


@pytest.mark.parametrize("scale", [1e-200, 1e200])
def test_tiny_and_huge_jacobians_have_the_scaled_spectrum(scale: float) -> None:
    g = torch.Generator().manual_seed(3)
    spectra = torch.stack([spectrum("gap-1e-4", 16, g) for _ in range(BATCH)])
    problem = prescribed_spectrum(spectra, 4, 4, seed=3, scale=scale)
    assert torch.allclose(problem.singular / scale, spectra.sort(dim=1, descending=True).values, atol=1e-13)


def test_crossing_top_values_cross_along_the_batch() -> None:
    problem = crossing(4, 4, seed=1)
    t = torch.linspace(0.1, -0.1, BATCH, dtype=F64)
    assert torch.allclose(dense_singular(problem)[:, :2], torch.stack([1 + t.abs(), 1 - t.abs()], 1), atol=1e-13)
    # the top right singular vector of the first input is the second one of the last
    J = jacobian_matrix(problem.fn, problem.X.double())
    v = torch.linalg.svd(J).Vh[:, :2]
    assert abs(float(v[0, 0] @ v[-1, 1])) == pytest.approx(1, abs=1e-12)


@pytest.mark.parametrize("heads,dtype", [(0, F64), (2, torch.float32)])
def test_saturated_attention_truth_is_its_dense_jacobian(heads: int, dtype: torch.dtype) -> None:
    problem = saturated_attention(4, 4, 8.0, seed=2, dtype=dtype, heads=heads)
    assert problem.X.dtype == dtype and problem.closed_form == bool(heads)
    assert torch.allclose(problem.X.double().norm(dim=-1), torch.full((BATCH, 4), 8.0, dtype=F64), rtol=1e-6)
    assert torch.allclose(problem.singular, dense_singular(problem), rtol=1e-12)


@given(kind=st.sampled_from(KINDS), seed=st.integers(0, 10_000), method=st.sampled_from(["lanczos", "power"]),
       accuracy=st.sampled_from([{"tol": 1e-6}, {"rtol": 1e-4}, {"rtol": 1e-9}]))
def test_value_is_below_the_norm_and_error_bounds_the_nearest_singular_value(kind: str, seed: int, method: str,
                                                                             accuracy: dict) -> None:
    """Rayleigh and the residual bound, for every spectrum and start: no premise needed."""
    g = torch.Generator().manual_seed(seed)
    problem = prescribed_spectrum(torch.stack([spectrum(kind, 16, g) for _ in range(BATCH)]), 4, 4, seed=seed)
    r = local_lipschitz(problem.fn, problem.X, method=method, seed=seed, max_iter=60, detailed=True, **accuracy)
    top = problem.singular[:, 0]
    assert bool((r.value <= top * (1 + 1e-14)).all())
    distance = (problem.singular - r.value.unsqueeze(1)).abs().min(dim=1).values
    assert bool((distance <= r.error * r.value + 1e-14 * top).all())


def test_map_rounding_is_zero_in_float64_and_small_in_float32() -> None:
    assert bool((map_rounding(saturated_attention(4, 4, 3.0, seed=0)) == 0).all())
    rounding = map_rounding(saturated_attention(4, 4, 3.0, seed=0, dtype=torch.float32))
    assert bool((rounding > 0).all()) and bool((rounding < 1e-4).all())


def test_cluster_width_follows_steps_below_the_gap() -> None:
    s = torch.tensor([[1.0, 0.99, 0.98, 0.5], [1.0, 0.5, 0.4, 0.3], [2.0, 2.0, 2.0, 2.0]], dtype=F64)
    assert cluster_width(s).tolist() == pytest.approx([0.02, 0.0, 0.0], abs=1e-15)


def planted_table() -> ResultTable:
    """One clean row and one row of every defect the counts must see."""
    rows = {  # name: (lip, nearest, width, value, error, converged, rtol, upper, raised)
        "clean": (2.0, 2.0, 0.0, 2.0 * (1 - 1e-9), 1e-8, 1, 1e-4, 2.1, ""),
        "above": (2.0, 2.0, 0.0, 2.0 * (1 + 1e-6), 1e-5, 1, math.nan, math.nan, ""),
        "unbounded": (2.0, 2.0, 0.0, 2.0 * (1 - 1e-4), 1e-8, 1, math.nan, math.nan, ""),
        "premise inside": (2.0, 1.99, 0.01, 1.99, 1e-9, 1, math.nan, math.nan, ""),
        "premise outside": (2.0, 1.8, 0.005, 1.8, 1e-9, 1, math.nan, math.nan, ""),
        "rtol missed": (2.0, 2.0, 0.0, 2.0 * (1 - 1e-3), 2e-3, 1, 1e-4, math.nan, ""),
        "interval failed": (2.0, 2.0, 0.0, 2.0 * (1 - 1e-9), 1e-8, 1, math.nan, 1.9, ""),
        "raised": (2.0, math.nan, 0.0, math.nan, math.nan, 0, math.nan, math.nan, "_LinAlgError"),
        "not a number": (2.0, 2.0, 0.0, math.nan, 1e-8, 1, math.nan, math.nan, ""),
    }
    names = list(rows)
    columns = dict(zip(["lip", "nearest", "width", "value", "error", "converged", "rtol", "upper", "raised"],
                       zip(*rows.values(), strict=True), strict=True))
    return ResultTable.from_columns({"input": list(range(len(names))), "dtype": ["float64"] * len(names),
                                     "rounding": [0.0] * len(names), "delta": [0.1] * len(names),
                                     **{k: list(v) for k, v in columns.items()}}, {"sweep": "planted"})


def test_counts_find_every_planted_defect() -> None:
    counts = certificate_counts(planted_table())
    assert (counts.inputs, counts.rows, counts.raised) == (9, 9, 1)
    assert (counts.above, counts.unbounded) == (1, 2)           # the NaN value is unbounded too
    assert (counts.premise, counts.outside) == (2, 1)
    assert counts.worst_cluster_ratio == pytest.approx(0.1 / (0.005 + 1e-9))
    assert (counts.rtol_asked, counts.rtol_missed) == (2, 1)
    assert (counts.interval, counts.interval_failed, counts.delta) == (2, 1, 0.1)


def test_flags_allow_the_truths_rounding() -> None:
    table = planted_table()
    frame = table.frame.copy()
    frame.loc[0, "value"] = 2.0 * (1 + 1e-15)            # above ‖J‖₂ by rounding only
    flags = certificate.certificate_flags(ResultTable(frame, table.provenance))
    assert not bool(flags["above"][0]) and not bool(flags["unbounded"][0])


@pytest.fixture(scope="module")
def audit() -> certificate.CertificateCounts:
    return certificate_counts(certificate_audit(200, seed=1))


@pytest.mark.slow
def test_audit_sample_covers_every_family(audit: certificate.CertificateCounts) -> None:
    table = certificate_audit(200, seed=1)
    assert audit.inputs == 200
    assert set(table.frame["family"]) >= {"linear float64", "prescribed float32", "crossing float64",
                                          "attention float32", "multi-head float32", "multi-head float64"}
    assert set(table.frame["method"]) == {"lanczos", "power"} and set(table.frame["start"]) == set(starts())


@pytest.mark.slow
def test_audit_sample_value_never_exceeds_the_norm(audit: certificate.CertificateCounts) -> None:
    assert (audit.raised, audit.above) == (0, 0)


@pytest.mark.slow
def test_audit_sample_error_bounds_the_nearest_singular_value(audit: certificate.CertificateCounts) -> None:
    assert audit.unbounded == 0


@pytest.mark.slow
def test_audit_sample_premise_misses_stay_in_the_top_cluster(audit: certificate.CertificateCounts) -> None:
    assert audit.outside == 0 and audit.worst_cluster_ratio <= 1


@pytest.mark.slow
def test_audit_sample_rtol_is_met_where_the_premise_holds(audit: certificate.CertificateCounts) -> None:
    assert audit.rtol_asked > 0 and audit.rtol_missed == 0


@pytest.mark.slow
def test_audit_sample_interval_fails_no_more_often_than_delta(audit: certificate.CertificateCounts) -> None:
    assert audit.interval > 0 and audit.interval_failed <= audit.delta * audit.interval
