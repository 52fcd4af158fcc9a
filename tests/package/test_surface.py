"""The ratchet that keeps the surface small: a module's ``__all__`` names only what another module of lipnb, a bench
script or a chapter uses, what its floor publishes, and the types their signatures mention; and no module of lipnb
imports another's private name. What only its own module or the tests use is private (``_name``); a test may
import a private name of its floor's modules.

Uses are read from the code (imports, and attributes of imported modules, resolved through each floor's
``PUBLISHED`` and its ``__init__``'s imports), as :mod:`lipnb.sources` reads import closures: nothing is imported
to find them.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import lipnb

ROOT = Path(lipnb.__file__).resolve().parent
REPO = ROOT.parent


def _file(module: str) -> Path | None:
    """The file of the lipnb module or package ``module`` (``lipnb.core.bounds``), or None."""
    if module.split(".")[0] != "lipnb":
        return None
    stem = ROOT.joinpath(*module.split(".")[1:])
    if stem.with_suffix(".py").is_file():
        return stem.with_suffix(".py")
    if (stem / "__init__.py").is_file():
        return stem / "__init__.py"
    return None


def _is_package(module: str) -> bool:
    path = _file(module)
    return path is not None and path.name == "__init__.py"


def _published(package: str) -> dict[str, str]:
    """``{name: module}`` of a package's ``PUBLISHED`` map, read without importing it."""
    path = _file(package)
    for node in ast.parse(path.read_text(encoding="utf-8")).body if path else ():
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "PUBLISHED" and node.value is not None:
            return {name: f"{package}.{module}" for module, names in ast.literal_eval(node.value).items()
                    for name in names}
    return {}


def _owners(package: str) -> dict[str, str]:
    """``{name: module}`` of what a package publishes: its ``PUBLISHED`` map, and the names its ``__init__.py``
    imports from a module of its own (``from .checks import check``)."""
    owners = dict(_published(package))
    path = _file(package)
    for node in ast.parse(path.read_text(encoding="utf-8")).body if path else ():
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            owners.update({a.asname or a.name: f"{package}.{node.module}" for a in node.names})
    return owners


def _all(module: str) -> list[str]:
    """A module's ``__all__`` as written (its literal list), read without importing it."""
    path = _file(module)
    for node in ast.parse(path.read_text(encoding="utf-8")).body if path else ():
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "__all__"):
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return []
    return []


@dataclass(frozen=True)
class Use:
    """``name`` of the lipnb module ``module`` used by ``where`` (a path below the repository)."""

    module: str
    name: str
    where: str


def uses(tree: ast.Module, where: str, module: str | None = None) -> Iterator[Use]:
    """Every use of a lipnb module's name in ``tree`` (the code at ``where``; ``module`` is its dotted name when
    it is a module of lipnb, for relative imports): names imported from a module, attributes of an imported module
    (``bounds.gamma``, ``lipnb.core.bounds.gamma``), names a floor publishes (resolved to the module that holds
    them)."""
    package = None if module is None else (module if _is_package(module) else module.rpartition(".")[0])
    modules: dict[str, str] = {}  # local name -> the lipnb module or package it is bound to

    def resolve(owner: str, name: str) -> Iterator[Use]:
        yield Use(owner, name, where)
        if _is_package(owner) and name in _owners(owner):
            yield from resolve(_owners(owner)[name], name)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if _file(target) is None:
                continue
            for alias in node.names:
                inner = f"{target}.{alias.name}"
                if _is_package(target) and _file(inner) is not None:
                    modules[alias.asname or alias.name] = inner
                else:
                    yield from resolve(target, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _file(alias.name) is not None:
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        # the outermost attribute chain on a bound module: lipnb.core.bounds.gamma, bounds.gamma
        if isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in modules:
                continue
            owner = modules[value.id]
            for attr in reversed(chain):
                if _is_package(owner) and _file(f"{owner}.{attr}") is not None:
                    owner = f"{owner}.{attr}"
                    continue
                yield from resolve(owner, attr)
                break


def _names_in(node: ast.AST | None) -> set[str]:
    """The bare names an annotation or expression mentions (a string annotation is parsed)."""
    found: set[str] = set()
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                found |= _names_in(ast.parse(sub.value, mode="eval"))
            except SyntaxError:
                pass
    return found


def _signature(definition: ast.AST) -> set[str]:
    """The names in the surface of a module-level definition: a function's annotations, a class's bases, field
    annotations and public methods' annotations, a constant's annotation or class, a type alias's value."""
    if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef):
        args = definition.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
        return set().union(_names_in(definition.returns), *(_names_in(a.annotation) for a in every))
    if isinstance(definition, ast.ClassDef):
        found = set().union(*(_names_in(b) for b in definition.bases))
        for node in definition.body:
            if isinstance(node, ast.AnnAssign):
                found |= _names_in(node.annotation)
            elif isinstance(node, ast.FunctionDef) and (not node.name.startswith("_") or node.name == "__init__"):
                found |= _signature(node) - {definition.name}
        return found
    found = _names_in(definition.annotation) if isinstance(definition, ast.AnnAssign) else set()
    value = definition.value if isinstance(definition, ast.Assign | ast.AnnAssign) else None
    if isinstance(value, ast.Subscript | ast.BinOp):
        found |= _names_in(value)  # a type alias: Kind = Literal[...], Map = Callable[...]
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        found.add(value.func.id)  # a constant of a class: SETTING = Setting(...)
    return found


def surface_types(module: str, public: set[str]) -> set[str]:
    """The classes, constants and type aliases of ``module`` that the signatures of ``public`` (names used elsewhere
    or published) mention, transitively: a type a public function takes or returns is part of its surface, used or
    not by name."""
    path = _file(module)
    definitions: dict[str, ast.AST] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body if path else ():
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            definitions[node.targets[0].id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            definitions[node.target.id] = node
    seen, todo = set(public), list(public)
    while todo:
        for name in _signature(definitions.get(todo.pop(), ast.Pass())) & set(definitions):
            if name not in seen and not isinstance(definitions[name], ast.FunctionDef | ast.AsyncFunctionDef):
                seen.add(name)
                todo.append(name)
    return seen - set(public)


def module_name(path: Path) -> str:
    return ".".join(("lipnb", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")


def chapter_code(chapter: Path) -> ast.Module:
    """A chapter's code cells as one module (magics left out)."""
    import jupytext

    cells = [c.source for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    lines = [line for cell in cells for line in cell.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


@functools.cache
def all_uses(tests: bool = False) -> list[Use]:
    """Every use of a lipnb name by lipnb's modules, the bench scripts and the chapters (and the tests)."""
    found: list[Use] = []
    for path in sorted(ROOT.rglob("*.py")):
        found += uses(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(REPO).as_posix(),
                      module_name(path))
    scripts = sorted((REPO / "bench").glob("*.py")) + sorted((REPO / "_ext").glob("*.py"))
    scripts += sorted((REPO / "tests").rglob("*.py")) if tests else []
    for path in scripts:
        found += uses(ast.parse(path.read_text(encoding="utf-8")), path.relative_to(REPO).as_posix())
    for chapter in sorted((REPO / "book").glob("*.md")):
        if chapter.with_suffix(".ipynb").exists():
            found += uses(chapter_code(chapter), chapter.relative_to(REPO).as_posix())
    return found


MODULES = sorted(module_name(p) for p in ROOT.rglob("*.py") if not p.stem.startswith("_"))

# Names of modules that other engineers are editing now, used nowhere else yet: each becomes private (a leading
# underscore, out of ``__all__``) once their work has landed. The list only shrinks: a name that is used elsewhere or
# gone from ``__all__`` must leave it.
PENDING: dict[str, set[str]] = {
    "lipnb.core.certify": {"FLOAT32_ULPS", "FLOAT64_ULPS"},
    "lipnb.core.krylov": {"batched_dot", "fill_holes"},
    "lipnb.experiments.certificate": {"CLUSTER_GAP", "cluster_width", "crossing", "map_rounding",
                                      "prescribed_spectrum", "saturated_attention", "settings", "spectrum", "starts"},
    "lipnb.report.figures": {"BODY_PX", "COLUMN_PX", "MIN_TEXT_PX"},
}


def unused(module: str) -> set[str]:
    """The names of ``module``'s ``__all__`` that no other module of lipnb, no bench script and no chapter uses,
    that its floor does not publish and that no signature of a used or published name mentions."""
    me = _file(module).relative_to(REPO).as_posix()
    used = {u.name for u in all_uses() if u.module == module and u.where != me}
    package = module.rpartition(".")[0]
    used |= {n for p in {package, "lipnb"} for n, owner in _owners(p).items() if owner == module}
    listed = set(_all(module))
    return listed - used - surface_types(module, used & listed)


@pytest.mark.parametrize("module", MODULES)
def test_all_lists_only_what_another_module_a_bench_script_or_a_chapter_uses(module: str) -> None:
    """What only its own module (or the tests) uses is private: a leading underscore, out of ``__all__``. A test may
    import a private name of its floor's modules."""
    found = unused(module)
    pending = PENDING.get(module, set())
    assert not found - pending, (f"{module}.__all__ names {sorted(found - pending)}, which no other module, bench "
                                 "script or chapter uses: make them private (a leading underscore, out of __all__)")
    assert not pending - found, f"{sorted(pending - found)} of {module} are no longer pending: drop them from PENDING"


def private_imports() -> list[Use]:
    """Every private name (``_name``) of a lipnb module that another module of lipnb imports or reads."""
    return [u for u in all_uses() if u.where.startswith("lipnb/") and u.name.startswith("_")
            and not u.name.startswith("__") and _file(u.module) is not None
            and u.where != _file(u.module).relative_to(REPO).as_posix()]


def test_no_module_of_lipnb_imports_another_modules_private_name() -> None:
    assert not private_imports(), f"private names used across modules (make them public): {private_imports()}"


def test_the_uses_found_are_the_planted_ones() -> None:
    """Relative and absolute imports, attributes of imported modules and names published by a floor resolve to the
    module that holds them; a private name read across modules is seen."""
    planted = ast.parse("from ..core.bounds import gamma, _lemma_3_8\nfrom ..core import krylov, theorem_3_3\n"
                        "from .. import models\nimport lipnb.core.dense as dense\nimport lipnb\n"
                        "krylov.lanczos\nmodels.maps.head_A\ndense.jacobian_matrix\nlipnb.report.check\n"
                        "lipnb.local_lipschitz\nlipnb.core.measures.conditional_w2\n")
    found = {(u.module, u.name) for u in uses(planted, "lipnb/experiments/probe.py", "lipnb.experiments.probe")}
    assert found == {("lipnb.core.bounds", "gamma"), ("lipnb.core.bounds", "_lemma_3_8"),
                     ("lipnb.core", "theorem_3_3"), ("lipnb.core.bounds", "theorem_3_3"),
                     ("lipnb.core.krylov", "lanczos"), ("lipnb.models.maps", "head_A"),
                     ("lipnb.core.dense", "jacobian_matrix"), ("lipnb.report", "check"),
                     ("lipnb.report.checks", "check"), ("lipnb", "local_lipschitz"),
                     ("lipnb.core.lipschitz", "local_lipschitz"), ("lipnb.core.measures", "conditional_w2")}


def test_a_type_in_a_used_signature_stays_public() -> None:
    """``fit_line`` returns a ``LineFit``: the type is part of the function's surface though no module names it."""
    assert "LineFit" in surface_types("lipnb.experiments.stats", {"fit_line"})
    assert "LineFit" not in surface_types("lipnb.experiments.stats", {"student_interval"})


def test_the_ratchet_fires_on_a_planted_name_and_a_planted_private_import(monkeypatch: pytest.MonkeyPatch) -> None:
    here = sys.modules[__name__]
    listed = _all("lipnb.core.bounds")
    monkeypatch.setattr(here, "_all", lambda module: [*listed, "helper"] if module == "lipnb.core.bounds" else [])
    assert unused("lipnb.core.bounds") == {"helper"}
    planted = [Use("lipnb.core.bounds", "_lemma_3_8", "lipnb/experiments/probe.py"),
               Use("lipnb.core.bounds", "_lemma_3_8", "lipnb/core/bounds.py"),
               Use("lipnb.core.bounds", "__doc__", "lipnb/experiments/probe.py")]
    monkeypatch.setattr(here, "all_uses", lambda tests=False: planted)
    assert private_imports() == planted[:1]
