"""The float32 audit (:mod:`lipnb.experiments.float32_audit`): both paths on a small saturated family, every
converged result within its error of a singular value of the dense float64 truth; the float32-only wrapper has no
float64 evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lipnb.experiments import float32_audit


def test_float32_only_refuses_float64() -> None:
    fn, truth, X = float32_audit.saturated_head(30.0, 0)
    wrapped = float32_audit.Float32Only(fn)
    assert torch.equal(wrapped(X), fn(X))
    with pytest.raises(TypeError):
        wrapped(X.double())
    assert torch.allclose(truth(X.double()), fn(X).double(), rtol=1e-4, atol=1e-4)
    assert torch.allclose(X.norm(dim=-1), torch.full((4, 6), 30.0))


def test_audit_has_no_breach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))
    frame = float32_audit.float32_saturated_audit((10.0, 100.0), seeds=2).frame
    assert len(frame) == 2 * 2 * 2 * 4 and set(frame["path"]) == {"promoted", "float32 only"}
    converged = frame[frame["converged"]]
    assert bool((converged["nearest"] <= converged["error"] + 1e-12).all())
    assert bool(frame[frame["path"] == "promoted"]["converged"].all())
