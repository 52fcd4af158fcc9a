"""lipnb: the numerical core of the executable book *How Smooth Is Attention?*.

One module per concept: the maps (:mod:`~lipnb.attention`, :mod:`~lipnb.normalization`), Lemma C.2
taken apart (:mod:`~lipnb.jacobian`), local Lipschitz constants (:mod:`~lipnb.lipschitz`), every bound
(:mod:`~lipnb.bounds`), the inputs that attain them (:mod:`~lipnb.inputs`), attention on measures
(:mod:`~lipnb.measures`) and as a flow (:mod:`~lipnb.flow`), real layers taken apart (:mod:`~lipnb.heads`),
fits and intervals (:mod:`~lipnb.stats`), cached sweeps (:mod:`~lipnb.synthetic`, :mod:`~lipnb.real_text`,
:mod:`~lipnb.adversarial`) returning typed tables
(:mod:`~lipnb.results`), and what a chapter does with them (:mod:`~lipnb.report`). Real models, texts and
run profiles (:mod:`~lipnb.models`, :mod:`~lipnb.data`, :mod:`~lipnb.profiles`) and the modules that
need them are imported on first use, because they load ``transformers`` or ``pandas``.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from pathlib import Path
from types import ModuleType

from . import bounds, inputs
from .attention import MultiHead, attention_matrix, mask_future, multihead_attention, self_attention
from .jacobian import MultiHeadMap, lemma_c_2_jvp
from .lipschitz import (
    LipschitzResult,
    NotConvergedWarning,
    exact_local_lipschitz,
    jacobian_matrix,
    local_lipschitz,
    weighted_operator_norm,
)

__all__ = [
    "LipschitzResult",
    "MultiHead",
    "MultiHeadMap",
    "NotConvergedWarning",
    "__version__",
    "attention_matrix",
    "bounds",
    "exact_local_lipschitz",
    "inputs",
    "jacobian_matrix",
    "lemma_c_2_jvp",
    "local_lipschitz",
    "mask_future",
    "multihead_attention",
    "self_attention",
    "weighted_operator_norm",
]

# Every module of the package, found on disk so that none is left out: imported on first attribute access.
_LAZY = frozenset(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lipnb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
