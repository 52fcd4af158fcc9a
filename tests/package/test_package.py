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


@pytest.mark.slow
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


# The published surface: the top of the package and each floor publish names (``PUBLISHED``); chapters use nothing
# else, so that a function may move between the modules of its floor without a chapter noticing.
FLOORS = ("core", "models", "paper", "experiments", "report")


def _published(floor: str) -> set[str]:
    return set((lipnb if floor == "lipnb" else getattr(lipnb, floor)).__all__)


@pytest.mark.parametrize("floor", ["lipnb", *FLOORS])
def test_every_published_name_lives_in_the_module_that_publishes_it(floor: str) -> None:
    """A published name resolves, and a function or class is defined where its floor says (one home each)."""
    package = lipnb if floor == "lipnb" else getattr(lipnb, floor)
    owner = {name: module for module, names in getattr(package, "PUBLISHED", {}).items() for name in names}
    for name in package.__all__:
        value = getattr(package, name)
        if name in owner and (inspect.isfunction(value) or inspect.isclass(value)):
            assert value.__module__ == f"{package.__name__}.{owner[name]}", f"{package.__name__}.{name}"


def _chapter_code(chapter: Path) -> ast.Module:
    import jupytext

    cells = [c.source for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    lines = [line for cell in cells for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def unpublished_uses(tree: ast.Module) -> list[str]:
    """Every ``lipnb`` name a chapter's code uses that is not published: a module reached below a floor
    (``lipnb.core.bounds``), or a name its floor does not publish."""
    floors = {f"lipnb.{f}": _published(f) for f in FLOORS} | {"lipnb": _published("lipnb") | set(FLOORS)}
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("lipnb"):
                    if a.name not in floors:
                        found.append(f"import {a.name}")
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "lipnb"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lipnb"):
            if node.module not in floors:
                found.append(f"from {node.module} import ...")
                continue
            for a in node.names:
                if a.name not in floors[node.module]:
                    found.append(f"{node.module}.{a.name}")
                elif f"{node.module}.{a.name}" in floors:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            base = aliases[node.value.id]
            if base in floors and node.attr not in floors[base]:
                found.append(f"{base}.{node.attr}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and isinstance(node.value.value, ast.Name) and aliases.get(node.value.value.id) == "lipnb"):
            base = f"lipnb.{node.value.attr}"
            if base in floors and node.attr not in floors[base]:
                found.append(f"{base}.{node.attr}")
    return sorted(set(found))


CHAPTERS = sorted(p for p in (ROOT.parent / "book").glob("*.md") if p.with_suffix(".ipynb").exists())


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_chapters_use_only_published_names(chapter: Path) -> None:
    assert not unpublished_uses(_chapter_code(chapter)), (
        f"{chapter.name} uses names its floors do not publish (publish them in the floor's PUBLISHED, or use a "
        f"published one): {unpublished_uses(_chapter_code(chapter))}")


def test_the_published_check_finds_planted_uses() -> None:
    planted = ast.parse("import lipnb\nfrom lipnb.core import bounds\nfrom lipnb.core.bounds import gamma\n"
                        "from lipnb.core import theorem_3_3, nonexistent\nlipnb.core.krylov.lanczos\n"
                        "lipnb.local_lipschitz\nfrom lipnb import report\nreport.check\nreport.hidden\n")
    assert unpublished_uses(planted) == ["from lipnb.core.bounds import ...", "lipnb.core.bounds",
                                         "lipnb.core.krylov", "lipnb.core.nonexistent", "lipnb.report.hidden"]


def published_surface() -> str:
    """README's section on the published surface, as this build publishes it."""
    lines = []
    for floor in ["lipnb", *FLOORS]:
        package = lipnb if floor == "lipnb" else getattr(lipnb, floor)
        names = ", ".join(f"`{n}`" for n in sorted(package.__all__, key=str.lower) if not n.startswith("__"))
        lines.append(f"- **`{package.__name__}`**: {names}")
    return "\n".join(lines)


def test_the_readme_documents_the_published_surface() -> None:
    readme = (ROOT.parent / "README.md").read_text()
    begin, end = "<!-- published surface -->", "<!-- end of published surface -->"
    assert begin in readme and end in readme, f"README.md: add the section between {begin} and {end}"
    section = readme[readme.index(begin) + len(begin):readme.index(end)].strip()
    assert section == published_surface(), "README.md's published surface differs; it should read:\n" + \
        published_surface()


def test_a_published_name_follows_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor holds no copy of a published name: replacing it in its module (a mutation test) is seen through
    the floor at once, and undoing it leaves no edited function behind."""
    original = lipnb.core.bounds.theorem_3_3
    assert lipnb.core.theorem_3_3 is original
    monkeypatch.setattr(lipnb.core.bounds, "theorem_3_3", len)
    assert lipnb.core.theorem_3_3 is len
    monkeypatch.undo()
    assert lipnb.core.theorem_3_3 is original and "theorem_3_3" not in vars(lipnb.core)


# Where a module's tests are when they are not in ``tests/<floor>/test_<module>.py`` (the floor of a module at the
# top of the package is ``ground``): each module's tests can be found by its name or here.
TESTED_IN = {
    "core.linearization": "tests/core/test_fast_path.py",
    "experiments.benchmark_schema": "tests/experiments/test_benchmark.py",
    "models.loading": "tests/models/test_models.py",
    "models.maps": "tests/models/test_models.py",
    "paper.paper_numbers": "tests/experiments/test_verdicts.py",
    "paper.paper_settings": "tests/paper/test_published.py",
    "report.checks": "tests/report/test_report.py",
    "report.figures": "tests/report/test_report.py",
    "report.glue": "tests/report/test_report.py",
    "report.tables": "tests/report/test_report.py",
}


def _test_file(module: str) -> str:
    floor, _, name = module.rpartition(".")
    return f"tests/{floor or 'ground'}/test_{name}.py"


@pytest.mark.parametrize("name", MODULES)
def test_every_module_has_a_test_file_of_its_name_or_one_listed(name: str) -> None:
    own = ROOT.parent / _test_file(name)
    if name in TESTED_IN:
        assert not own.exists(), f"lipnb.{name} has {_test_file(name)}: drop it from TESTED_IN"
        assert (ROOT.parent / TESTED_IN[name]).is_file(), f"{TESTED_IN[name]}, listed for lipnb.{name}, is gone"
    else:
        assert own.is_file(), f"lipnb.{name} has no {_test_file(name)} (or list the file that tests it in TESTED_IN)"
