"""lipnb.lazy: a package's modules and published names, imported on first attribute access, on a package written
for the test."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lipnb.lazy import lazy_modules, published_names

INIT = """
from lipnb.lazy import lazy_modules
PUBLISHED = {published!r}
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
"""


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    """A package ``lazypkg`` with modules ``alpha`` and ``_hidden`` and a subpackage ``sub``; ``alpha`` publishes
    ``value``, each module records its import in ``lazypkg_log``."""
    root = tmp_path / "lazypkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(INIT.format(published={"alpha": ("value",)}))
    (root / "alpha.py").write_text("import lazypkg_log\nlazypkg_log.seen.append('alpha')\nvalue = 42\nother = 1\n")
    (root / "_hidden.py").write_text("import lazypkg_log\nlazypkg_log.seen.append('_hidden')\n")
    (root / "sub" / "__init__.py").write_text("import lazypkg_log\nlazypkg_log.seen.append('sub')\n")
    (tmp_path / "lazypkg_log.py").write_text("seen = []\n")
    sys.path.insert(0, str(tmp_path))
    try:
        yield "lazypkg"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] in ("lazypkg", "lazypkg_log")]:
            del sys.modules[name]


def test_modules_and_published_names_are_imported_on_first_use(package: str) -> None:
    pkg = importlib.import_module(package)
    log = importlib.import_module("lazypkg_log")
    assert log.seen == []  # importing the package imports none of its modules
    assert pkg.alpha.other == 1 and log.seen == ["alpha"]
    assert pkg.sub.__name__ == "lazypkg.sub" and log.seen == ["alpha", "sub"]
    assert pkg.value == 42 and "value" not in vars(pkg)  # resolved on each access, never bound in the package
    pkg.alpha.value = 43
    assert pkg.value == 43  # so a replaced name (a mutation test's) is seen through the package at once


def test_dir_lists_every_module_and_published_name_but_private_ones(package: str) -> None:
    pkg = importlib.import_module(package)
    assert {"alpha", "sub", "value"} <= set(dir(pkg))
    assert "_hidden" not in dir(pkg) and importlib.import_module("lazypkg_log").seen == []
    with pytest.raises(AttributeError, match="no attribute '_hidden'"):
        pkg._hidden  # noqa: B018
    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'other'"):
        pkg.other  # noqa: B018  (a name of a module, not published)


def test_published_names_maps_each_name_to_its_one_module() -> None:
    assert published_names("p", {"a": ("x", "y"), "b": ("z",)}) == {"x": "a", "y": "a", "z": "b"}
    with pytest.raises(ValueError, match=r"'x' is published by both \.a and \.b"):
        published_names("p", {"a": ("x",), "b": ("x",)})


def test_a_published_name_may_not_hide_a_module(tmp_path: Path) -> None:
    (tmp_path / "alpha.py").write_text("")
    with pytest.raises(ValueError, match=r"published names \['alpha'\] would hide the modules"):
        lazy_modules("p", str(tmp_path / "__init__.py"), {}, {"beta": ("alpha",)})
