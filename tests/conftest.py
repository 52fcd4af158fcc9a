"""Shared pytest configuration for the numerical tests of :mod:`lipnb`.

* Hypothesis runs a small, reproducible number of examples by default (profile ``lipnb``); set
  ``HYPOTHESIS_PROFILE=thorough`` for a longer randomised search.
* Random problems drawn by tests in several files (``from conftest import random_attention_params``):
  ``random_multihead``, ``random_head_matrix``, ``random_attention_problem``, ``random_attention_params``.
* ``alice``: the pre-seeded Alice text and an empty results cache, for the sweeps that read it.
* Mutation tests edit an implementation and run a chapter's own cells: ``tests/book/chapter_mutations.py``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from lipnb import MultiHead, data

Map = Callable[[Tensor], Tensor]
F64 = torch.float64
# A ``device`` parameter that runs where a GPU is present and is skipped elsewhere.
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"))

# The "explain" phase traces lines with sys.settrace / sys.monitoring, which has crashed the interpreter
# (Fatal Python error: Aborted) while shrinking a failure in torch code; the other phases are kept.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
settings.register_profile(
    "lipnb",
    max_examples=30,
    phases=PHASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=300,
    phases=PHASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lipnb"))


def pytest_configure(config: pytest.Config) -> None:
    # torch.func.jvp registers its decompositions with torch.jit.script on first use (torch internals).
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script` is deprecated:DeprecationWarning")


# The chapters that take longest from an empty results cache (`--durations` of a cold `make test`), longest first.
# Run first, they overlap the many short tests; left in collection order, one of them could start last and keep
# the other worker idle. The Makefile turns off pytest-xdist's own reordering (by number of tests) to keep this.
LONGEST_FIRST = ("real_text", "adversarial", "deep_language_models", "language_models", "certificate",
                 "published_real_data", "smollm2", "smollm2_layers", "long_context", "rotary_heads")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {f"book/{name}.ipynb": i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order


@pytest.fixture
def gen() -> torch.Generator:
    """A freshly seeded CPU generator, so every test draws the same random problem each run."""
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def head_3(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A head of width 3 in float64 drawn from :func:`gen`: a symmetric ``A`` (real eigenvalues, as Lemma C.7
    needs) and a general ``V``."""
    M = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    return (M + M.T) / 4, torch.randn(3, 3, generator=gen, dtype=torch.float64) / 2


@pytest.fixture
def alice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Alice text (``$LIPNB_DATA_DIR``, else the pre-seeded mirror beside the clone when there is one, as the
    Makefile picks it; skipped where it cannot be read) and an empty results cache."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"
    if "LIPNB_DATA_DIR" not in os.environ and shared.is_dir():
        monkeypatch.setenv("LIPNB_DATA_DIR", str(shared))
    try:
        data.alice_text()
    except FileNotFoundError as missing:
        pytest.skip(f"no Alice text: {missing}")
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


# --------------------------------------------------------------------------- random problems


def random_multihead(gen: torch.Generator, d: int = 8, H: int = 3, k: int = 2, biases: bool = True) -> MultiHead:
    """A random float64 layer of ``H`` heads of width ``k`` on ``R^d``; query, value, output biases if ``biases``."""
    Q, K, V = torch.randn(3, H, k, d, generator=gen, dtype=F64)
    W = torch.randn(H, d, k, generator=gen, dtype=F64)
    if not biases:
        return MultiHead.from_projections(Q, K, V, W)
    b_Q, b_V = torch.randn(2, H, k, generator=gen, dtype=F64)
    o_bias = torch.randn(d, generator=gen, dtype=F64)
    return MultiHead.from_projections(Q, K, V, W, q_bias=b_Q, v_bias=b_V, o_bias=o_bias)


def random_head_matrix(gen: torch.Generator, d: int) -> torch.Tensor:
    """A random float64 ``(d, d)`` score matrix ``A`` with entries of variance ``1/d``."""
    return torch.randn(d, d, generator=gen, dtype=F64) / math.sqrt(d)


def random_attention_problem(gen: torch.Generator, n: int = 5, d: int = 3, d_v: int = 2
                             ) -> tuple[torch.Tensor, ...]:
    """``(X (2, n, d), A (d, d), V (d_v, d))`` in float64: normal tokens, ``A`` and ``V`` scaled by ``1/sqrt(d)``."""
    X = torch.randn(2, n, d, generator=gen, dtype=F64)
    A = torch.randn(d, d, generator=gen, dtype=F64) / math.sqrt(d)
    V = torch.randn(d_v, d, generator=gen, dtype=F64) / math.sqrt(d)
    return X, A, V


def random_attention_params(gen: torch.Generator, d: int = 3, d_v: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A (d, d), V (d_v, d))`` in float64, scaled by ``1/sqrt(d)``."""
    A = torch.randn(d, d, generator=gen, dtype=F64) / d**0.5
    V = torch.randn(d_v, d, generator=gen, dtype=F64) / d**0.5
    return A, V


# --------------------------------------------------------------------------- prescribed spectra


def prescribed_jacobians(values: list[list[float]], n: int, d: int, g: torch.Generator) -> torch.Tensor:
    """Jacobians ``U diag(s) Vᵀ`` of shape ``(B, n d, n d)`` in float64, with the singular values ``values[b]``
    (zero-padded) and random orthogonal ``U``, ``V`` drawn from ``g``."""
    N = n * d
    out = []
    for s in values:
        U = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))[0]
        V = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))[0]
        full = torch.zeros(N, dtype=torch.float64)
        full[: len(s)] = torch.tensor(s, dtype=torch.float64)
        out.append(U @ torch.diag(full) @ V.T)
    return torch.stack(out)


def assert_flops_counted(fn: object, X: Tensor) -> None:
    """``fn.flops(n)`` (the cost model of a map with a closed form) equals torch's count of the matrix products
    that ``fn.linearize(X)`` and one ``JᵀJ`` product (a JVP then a VJP) actually run, ``n = X.shape[1]``."""
    with FlopCounterMode(display=False) as counter:
        lin = fn.linearize(X)
    assert counter.get_total_flops() == fn.flops(X.shape[1])["linearize"]
    with FlopCounterMode(display=False) as counter:
        lin.vjp(lin.jvp(torch.ones_like(X)))
    assert counter.get_total_flops() == fn.flops(X.shape[1])["product"]
