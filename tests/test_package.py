"""The public surface: every module reachable as ``lipnb.<name>``, every public definition in its ``__all__``."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import lipnb

MODULES = sorted(p.stem for p in Path(lipnb.__file__).parent.glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", MODULES)
def test_module_is_reachable_and_its_all_is_complete(name: str) -> None:
    module = getattr(lipnb, name)
    defined = {n for n, obj in vars(module).items() if not n.startswith("_")
               and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__}
    assert defined <= set(module.__all__), f"lipnb.{name}.__all__ leaves out {sorted(defined - set(module.__all__))}"
    assert set(module.__all__) <= set(vars(module)), f"lipnb.{name}.__all__ names what it does not define"
    assert name in dir(lipnb)


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        lipnb.nonexistent  # noqa: B018


def test_import_lipnb_stays_light() -> None:
    """``import lipnb`` loads neither transformers nor pandas: those come with the modules that need them."""
    code = "import sys, lipnb; print(sorted(m for m in ('transformers', 'pandas') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
