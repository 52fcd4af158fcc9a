"""Colab: every chapter starts with the cell that installs the book there, from the address in _config.yml.

The cell is run verbatim in a fresh interpreter with a fake Colab: a ``google.colab`` module, a ``pip``
that records its arguments and "installs" a stub ``lipnb`` that records the profile it is given. Nothing
reaches the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
from colab_cell import MARKER, first_cell, repository_url  # noqa: E402

CHAPTERS = sorted((ROOT / "book").glob("[0-9]*.md"))

STUB_LIPNB = {
    "lipnb/__init__.py": "from . import profiles\n",
    "lipnb/profiles.py": textwrap.dedent("""\
        import json, os

        def set_profile(name):
            with open(os.environ["FAKE_LOG"], "a") as log:
                log.write(json.dumps(["set_profile", name]) + "\\n")

        def default_device():
            return "cpu"
        """),
}
FAKE_PIP = textwrap.dedent("""\
    import json, os, sys
    from pathlib import Path

    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(["pip", *sys.argv[1:]]) + "\\n")
    for name, text in json.loads(os.environ["STUB_LIPNB"]).items():
        path = Path(os.environ["FAKE_SITE"]) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    """)


def _run_cell(tmp_path: Path, source: str, colab: bool, installed: bool) -> list[list[str]]:
    """Run ``source`` in a fresh interpreter that sees only the stdlib and the fakes; return what they logged."""
    site = tmp_path / "site"
    for name, text in {"pip/__init__.py": "", "pip/__main__.py": FAKE_PIP}.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    if colab:
        (site / "google" / "colab").mkdir(parents=True)
        (site / "google" / "colab" / "__init__.py").write_text("")
    if installed:
        for name, text in STUB_LIPNB.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(text)
    log = tmp_path / "log.jsonl"
    log.touch()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site), "FAKE_LOG": str(log),
           "FAKE_SITE": str(site), "STUB_LIPNB": json.dumps(STUB_LIPNB)}
    # The Colab kernel imports google.colab before any cell runs; -S keeps the real site-packages away.
    kernel = ("import google.colab\n" if colab else "") + source
    done = subprocess.run([sys.executable, "-S", "-c", kernel], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_install_cell_installs_from_the_configured_repository_on_colab(tmp_path: Path) -> None:
    calls = _run_cell(tmp_path, first_cell(), colab=True, installed=False)
    assert calls == [["pip", "install", "-q", f"git+{repository_url()}"], ["set_profile", "quick"]]


def test_install_cell_does_nothing_outside_colab(tmp_path: Path) -> None:
    assert _run_cell(tmp_path, first_cell(), colab=False, installed=True) == [["set_profile", "quick"]]


def test_install_cell_does_not_reinstall_on_colab(tmp_path: Path) -> None:
    assert _run_cell(tmp_path, first_cell(), colab=True, installed=True) == [["set_profile", "quick"]]


def test_one_line_switches_to_the_paper_profile(tmp_path: Path) -> None:
    source = first_cell().replace('PROFILE = "quick"', 'PROFILE = "paper"')
    assert source != first_cell()
    assert _run_cell(tmp_path, source, colab=False, installed=True) == [["set_profile", "paper"]]


def test_launch_button_and_install_cell_read_the_same_address() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"]
    assert url.startswith("https://github.com/"), "the Colab button needs a GitHub repository.url"
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert f"git+{url}" in first_cell()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_chapter_starts_with_the_colab_cell(chapter: Path) -> None:
    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    assert code and code[0].source.startswith(MARKER), f"{chapter.name}: run `python _ext/colab_cell.py`"
    assert code[0].source == first_cell(), (
        f"{chapter.name}: its first cell differs from the one built from _config.yml: run `python _ext/colab_cell.py`"
    )
