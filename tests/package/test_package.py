"""The public surface: every module reachable as ``lipnb.<name>`` or ``lipnb.<floor>.<name>``, every public
definition in its ``__all__``; the floors' import contracts hold."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import lipnb

ROOT = Path(lipnb.__file__).parent
# Every module as its dotted path below lipnb: "checks", "core.krylov", ...
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in ROOT.rglob("*.py")
                 if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", MODULES)
def test_module_is_reachable_and_its_all_is_complete(name: str) -> None:
    owner = lipnb
    for part in name.split("."):
        assert part in dir(owner), f"{part!r} is not listed by dir() of {owner.__name__}"
        owner = getattr(owner, part)
    module = owner
    defined = {n for n, obj in vars(module).items() if not n.startswith("_")
               and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__}
    assert defined <= set(module.__all__), f"lipnb.{name}.__all__ leaves out {sorted(defined - set(module.__all__))}"
    assert set(module.__all__) <= set(vars(module)), f"lipnb.{name}.__all__ names what it does not define"


def test_every_folder_of_lipnb_is_a_floor_of_the_contracts() -> None:
    """Each subpackage is a layer of the import contract, so no floor escapes it."""
    text = (ROOT.parent / "pyproject.toml").read_text()
    for init in ROOT.glob("*/__init__.py"):
        assert f'"lipnb.{init.parent.name}"' in text, f"lipnb.{init.parent.name} is in no import contract"


def test_the_import_contracts_hold() -> None:
    """``lint-imports`` (import-linter): no floor imports a floor above it, the utilities import no floor."""
    exe = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(exe), "--no-cache"], capture_output=True, text=True, cwd=ROOT.parent)
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        lipnb.nonexistent  # noqa: B018


def test_import_lipnb_stays_light() -> None:
    """``import lipnb`` loads neither transformers nor pandas: those come with the modules that need them."""
    code = "import sys, lipnb; print(sorted(m for m in ('transformers', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# The only imports inside functions of lipnb, each with its reason: everything else is imported at the top
# of its module, so that the import graph (and the contracts above) see every edge.
DEFERRED_IMPORTS = {
    ("lipnb/data.py", "nltk"): "nltk is needed only to download Alice once, and is slow to import",
    ("lipnb/report/figures.py", "IPython.display"): "IPython belongs to a notebook build, not to the library",
    ("lipnb/report/figures.py", "myst_nb"): "myst_nb imports Sphinx; only a book build glues figures",
    ("lipnb/report/glue.py", "myst_nb"): "myst_nb imports Sphinx; only a book build glues numbers",
    ("lipnb/report/checks.py", "IPython.display"): "IPython belongs to a notebook build, not to the library",
    ("lipnb/models/loading.py", "transformers"): "transformers' GGUF reader imports gguf, an optional dependency "
                                                 "(the `book` extra) needed only for SmolLM2",
    ("lipnb/models/quantization.py", "gguf"): "gguf is an optional dependency (the `book` extra)",
}


def test_no_import_inside_a_function_but_the_listed_ones() -> None:
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.ImportFrom):
                        found.add((path.relative_to(ROOT.parent).as_posix(), "." * node.level + (node.module or "")))
                    elif isinstance(node, ast.Import):
                        found |= {(path.relative_to(ROOT.parent).as_posix(), a.name) for a in node.names}
    assert found == set(DEFERRED_IMPORTS), (f"unlisted: {sorted(found - set(DEFERRED_IMPORTS))}; "
                                            f"listed but gone: {sorted(set(DEFERRED_IMPORTS) - found)}")
