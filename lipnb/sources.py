"""The source a module of lipnb depends on: its import closure within the package, read from the code itself.

A sweep's cached result may change only when the code it runs changes. :func:`_import_closure` follows every
``import`` of a module (relative or absolute, every one of them at the top of its module: tests/package holds
lipnb to that) to the lipnb modules it names, transitively; a name imported from a floor's package resolves
through that floor's ``PUBLISHED`` map to the module that holds it, and a package imported as a whole brings in
every module below it. :func:`source_digest` hashes the closure's files, paths and bytes: editing a presentation
module leaves a sweep's digest as it was, editing anything the sweep imports changes it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

__all__ = ["source_digest"]

_PACKAGE_ROOT = Path(__file__).resolve().parent


def _file(root: Path, module: str) -> Path | None:
    """The file of ``module`` (``lipnb.core.bounds``) below ``root`` (the ``lipnb`` folder), or None."""
    parts = module.split(".")[1:]
    stem = root.joinpath(*parts)
    if stem.with_suffix(".py").is_file():
        return stem.with_suffix(".py")
    if (stem / "__init__.py").is_file():
        return stem / "__init__.py"
    return None


def _published(init: Path) -> dict[str, str]:
    """``{name: module}`` of a package's ``PUBLISHED`` map, read from its ``__init__.py`` without importing it."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id == "PUBLISHED" and node.value is not None:
            return {name: module for module, names in ast.literal_eval(node.value).items() for name in names}
    return {}


def _defined(init: Path) -> set[str]:
    """The names a package's ``__init__.py`` binds at its top level (assignments, definitions, imports)."""
    names: set[str] = set()
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _package_modules(root: Path, package: str) -> set[str]:
    folder = root.joinpath(*package.split(".")[1:])
    return {f"{package}.{'.'.join(p.relative_to(folder).with_suffix('').parts)}".removesuffix(".__init__")
            for p in folder.rglob("*.py")}


def _imports(root: Path, module: str) -> set[str]:
    """The lipnb modules that ``module`` imports directly."""
    path = _file(root, module)
    is_package = path is not None and path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str, names: list[str]) -> None:
        target_file = _file(root, target)
        if target_file is None:
            return
        if target_file.name != "__init__.py":
            found.add(target)
            return
        published = _published(target_file)
        for name in names:
            inner = _file(root, f"{target}.{name}")
            if inner is not None:  # a module, or a subpackage imported whole: every module below it
                found.update({f"{target}.{name}"} if inner.name != "__init__.py"
                             else _package_modules(root, f"{target}.{name}"))
            elif name in published:
                found.add(f"{target}.{published[name]}")
            elif name in _defined(target_file):  # a name of the package's own __init__ (and what it imports)
                found.add(target)
            else:  # a name the package makes lazily: every module below it
                found.update(_package_modules(root, target))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if path else ():
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "lipnb":
                add(target, [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target_file = _file(root, alias.name) if alias.name.split(".")[0] == "lipnb" else None
                if target_file is not None:
                    found.update(_package_modules(root, alias.name) if target_file.name == "__init__.py"
                                 else {alias.name})
    found.discard(module)
    return found


def _import_closure(module: str, root: Path = _PACKAGE_ROOT) -> list[str]:
    """Every lipnb module that ``module`` imports, directly or not, and ``module`` itself, sorted."""
    if not isinstance(module, str) or module.split(".")[0] != "lipnb" or _file(root, module) is None:
        raise ValueError(f"import_closure: {module!r} is not a module of lipnb below {root}")
    seen, todo = {module}, [module]
    while todo:
        for target in _imports(root, todo.pop()) - seen:
            seen.add(target)
            todo.append(target)
    return sorted(seen)


@functools.cache
def _digest(root: Path, files: tuple[Path, ...], stamp: tuple[int, ...]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def source_digest(root: Path = _PACKAGE_ROOT, module: str | None = None) -> str:
    """A hash of the source ``module`` depends on (its :func:`_import_closure`'s files, paths and bytes), or of every
    ``.py`` file below ``root`` when ``module`` is None."""
    root = Path(root).resolve()
    if module is None:
        files = sorted(root.rglob("*.py"))
    else:
        files = sorted(_file(root, m) for m in _import_closure(module, root))
    return _digest(root, tuple(files), tuple(p.stat().st_mtime_ns for p in files))
