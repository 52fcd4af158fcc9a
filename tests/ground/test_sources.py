"""lipnb.sources: a sweep's cache key follows the code it imports, and nothing else."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lipnb import results, sources

ROOT = sources._PACKAGE_ROOT


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the package's source to edit."""
    target = tmp_path / "lipnb"
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    return target


def test_a_sweep_depends_on_the_estimator_not_on_the_presentation() -> None:
    closure = sources._import_closure("lipnb.experiments.real_text")
    assert "lipnb.core.lipschitz" in closure and "lipnb.experiments.real_text" in closure
    assert not [m for m in closure if m.startswith("lipnb.report")], closure


@pytest.mark.slow
def test_editing_a_presentation_module_keeps_a_sweeps_key_and_editing_the_estimator_changes_it(copy: Path) -> None:
    sweep = "lipnb.experiments.real_text"
    before = sources.source_digest(copy, sweep)
    assert before == sources.source_digest(ROOT, sweep), "a copy of the same source has the same key"
    figures = copy / "report" / "figures.py"
    figures.write_text(figures.read_text() + "\n# a comment\n")
    assert sources.source_digest(copy, sweep) == before
    assert sources.source_digest(copy) != sources.source_digest(ROOT), "the whole package's hash did change"
    estimator = copy / "core" / "lipschitz.py"
    estimator.write_text(estimator.read_text() + "\n# a comment\n")
    assert sources.source_digest(copy, sweep) != before


def test_a_name_imported_from_a_floor_resolves_to_the_module_that_holds_it(copy: Path) -> None:
    (copy / "experiments" / "probe.py").write_text("from ..core import theorem_3_3\n")
    closure = sources._import_closure("lipnb.experiments.probe", copy)
    assert "lipnb.core.bounds" in closure and "lipnb.core.krylov" not in closure
    (copy / "experiments" / "probe.py").write_text("from .. import core\n")
    assert "lipnb.core.krylov" in sources._import_closure("lipnb.experiments.probe", copy), \
        "a package imported whole brings every module below it"


def test_moving_a_module_changes_the_hash(tmp_path: Path) -> None:
    """A module moved to another floor (same bytes) is a new key; the same tree has the same key."""
    for name in ("before", "after"):
        (tmp_path / name / "core").mkdir(parents=True)
        (tmp_path / name / "experiments").mkdir()
    (tmp_path / "before" / "core" / "m.py").write_text("x = 1\n")
    (tmp_path / "after" / "experiments" / "m.py").write_text("x = 1\n")
    assert sources.source_digest(tmp_path / "before") != sources.source_digest(tmp_path / "after")
    (tmp_path / "after" / "experiments" / "m.py").unlink()
    (tmp_path / "after" / "core" / "m.py").write_text("x = 1\n")
    assert sources.source_digest(tmp_path / "before") == sources.source_digest(tmp_path / "after")
    (tmp_path / "after" / "core" / "m.py").write_text("x = 2\n")
    assert sources.source_digest(tmp_path / "before") != sources.source_digest(tmp_path / "after")


def test_the_cache_key_is_the_sweeps_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``cached_table`` keys a sweep by the closure of the module that defines its ``compute``."""
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))

    def compute() -> dict:
        return {"x": [1.0]}

    compute.__module__ = "lipnb.experiments.real_text"
    table = results.cached_table("probe", {}, compute)
    assert table.provenance["code"] == results.code_version("lipnb.experiments.real_text") != results.code_version()


def test_an_unknown_module_is_refused() -> None:
    with pytest.raises(ValueError, match="not a module of lipnb"):
        sources._import_closure("lipnb.nonexistent")
    with pytest.raises(ValueError, match="not a module of lipnb"):
        sources._import_closure("numpy")
