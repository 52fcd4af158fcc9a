"""Every make target the README names does something: `make -n` (nothing run) prints at least one command for it.

A target declared `.PHONY` without a rule exits 0 and runs nothing; a reader who types it believes it worked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_TARGETS = sorted(set(re.findall(r"`make ([a-z][\w-]*)", (ROOT / "README.md").read_text())))


def _recipe(target: str, makefile: Path) -> list[str]:
    """The commands `make -n -B` would run for ``target`` of ``makefile`` (its prerequisites' included)."""
    out = subprocess.run(["make", "-n", "-B", "-f", str(makefile), target], cwd=makefile.parent,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"make -n {target}: {out.stderr.strip()}"
    return [line for line in out.stdout.splitlines() if line.strip() and not line.startswith("make")]


@pytest.mark.parametrize("target", README_TARGETS)
def test_every_target_the_readme_names_runs_something(target: str) -> None:
    assert _recipe(target, ROOT / "Makefile"), f"`make {target}` is named in README.md but runs nothing"


def test_the_check_finds_a_target_without_a_rule(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text(".PHONY: empty full\nfull:\n\techo hi\n")
    assert _recipe("full", tmp_path / "Makefile") == ["echo hi"]
    assert _recipe("empty", tmp_path / "Makefile") == []
