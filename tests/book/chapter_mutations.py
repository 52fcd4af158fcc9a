"""The mechanism of the mutation tests: edit one implementation of ``lipnb``, run a chapter's own cells, and
see its check fail.

A :class:`ChapterMutation` names an implementation (``owner.attribute``: a function of a module, or a method
of a class), an edit of it (a wrapper that returns a wrong function, or one line of its source replaced and
recompiled in its module's namespace), and a chapter's check, named by its stable ``key`` (``check.below(...,
key="thm-c3-holds")``), so that rewording a claim does not break the test.
:func:`chapter_mutation_test` makes the parametrised test: under the edit, the chapter's code cells run in
order, in one namespace, from an empty results cache, and the named check must be the one that fails. No check
is copied here: the chapters are the catchers.

The edit replaces every alias of the original in ``lipnb``'s modules (``from .bounds import theorem_3_3``
binds a second name), after importing every module of the package so that none binds the edited version;
afterwards the process's torch state (threads, default dtype, random generators) is restored and ``lipnb``'s
in-memory caches are emptied.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
import random
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import jupytext
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import lipnb

BOOK = Path(__file__).resolve().parents[2] / "book"

Wrapper = Callable[[Callable], Callable]


@dataclass(frozen=True)
class ChapterMutation:
    """``owner.attribute`` edited by ``edit`` (a wrapper, or ``(old, new)`` source text); under it the check with
    key ``key`` of ``book/<chapter>.md`` is the first to fail."""

    owner: object
    attribute: str
    edit: Wrapper | tuple[str, str]
    chapter: str
    key: str


def recompiled(owner: object, name: str, old: str, new: str) -> Callable:
    """``owner.name`` recompiled from its source with the one occurrence of ``old`` replaced by ``new``, in its
    module's namespace."""
    func = inspect.getattr_static(owner, name)
    source = textwrap.dedent(inspect.getsource(func))
    if source.count(old) != 1:
        raise ValueError(f"{name}: {old!r} occurs {source.count(old)} times in its source, not once")
    namespace = dict(vars(sys.modules[func.__module__]))
    exec(compile(source.replace(old, new), inspect.getsourcefile(func), "exec"), namespace)
    return namespace[name]


def lipnb_modules() -> list[object]:
    """Every module of ``lipnb``, imported, with every name each floor publishes resolved: a floor binds a published
    name in its namespace on first use, so a name first used under a mutation would keep the edited version after
    the patches are undone (the next chapter to run would import it); resolved beforehand, it is one more alias
    that :func:`apply` patches and undoes."""
    names = [info.name for info in pkgutil.walk_packages(lipnb.__path__, "lipnb.") if "__main__" not in info.name]
    modules = [lipnb, *(importlib.import_module(name) for name in names)]
    for module in modules:
        if hasattr(module, "PUBLISHED") and isinstance(module.__dict__.get("PUBLISHED"), dict):
            for name in module.__all__:
                getattr(module, name)
    return modules


def apply(monkeypatch: pytest.MonkeyPatch, mutation: ChapterMutation) -> None:
    """Replace ``mutation.owner.attribute`` and every alias of it in ``lipnb``'s modules by the edited version."""
    modules = lipnb_modules()
    original = inspect.getattr_static(mutation.owner, mutation.attribute)
    if isinstance(mutation.edit, tuple):
        edited = recompiled(mutation.owner, mutation.attribute, *mutation.edit)
    else:
        edited = mutation.edit(getattr(mutation.owner, mutation.attribute))
    monkeypatch.setattr(mutation.owner, mutation.attribute, edited)
    for module in modules:
        for name, value in list(vars(module).items()):
            if value is original:
                monkeypatch.setattr(module, name, edited)


def run_chapter(name: str) -> None:
    """Run the code cells of ``book/<name>.md`` in order, in one namespace, its output discarded; magics
    (``%matplotlib``) are skipped. A failing check stops it there."""
    namespace: dict[str, object] = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for cell in jupytext.read(BOOK / f"{name}.md").cells:
                if cell.cell_type == "code":
                    code = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))
                    exec(compile(code, f"{name}.md", "exec"), namespace)
    finally:
        plt.close("all")


@contextlib.contextmanager
def isolated(monkeypatch: pytest.MonkeyPatch, cache: Path) -> Iterator[None]:
    """An empty results cache and the Agg backend; afterwards every patch undone, and the process's torch,
    numpy and random state as they were before the chapter ran, and lipnb's in-memory caches emptied (they may
    hold values computed under the mutation)."""
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(cache))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        monkeypatch.undo()
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        for module in lipnb_modules():
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)) and str(getattr(value, "__module__", "")
                                                                          ).startswith("lipnb"):
                    value.cache_clear()


def chapter_mutation_test(mutations: dict[str, ChapterMutation]) -> Callable[..., None]:
    """The test of a mutation file: under each mutation, the chapter's named check is the first to fail."""

    @pytest.mark.parametrize("name", list(mutations))
    def test_mutation_fails_the_chapters_check(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        mutation = mutations[name]
        with isolated(monkeypatch, tmp_path):
            apply(monkeypatch, mutation)
            named = r"^check failed: FAILS: .* \| check " + re.escape(mutation.key) + "$"
            with pytest.raises(AssertionError, match=named):
                run_chapter(mutation.chapter)

    return test_mutation_fails_the_chapters_check
