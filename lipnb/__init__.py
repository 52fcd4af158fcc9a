"""lipnb: the numerical core of the executable book *How Smooth Is Attention?*.

Attention maps (:mod:`lipnb.attention`), local Lipschitz constants (:mod:`lipnb.lipschitz`),
the theorems' bounds (:mod:`lipnb.bounds`) and the inputs that attain them
(:mod:`lipnb.adversarial`). Real models and text live in :mod:`lipnb.models` and
:mod:`lipnb.data`, imported on first use because they load ``transformers``.
"""

from __future__ import annotations

__version__ = "0.1.0"

import importlib
from types import ModuleType

from . import adversarial, bounds
from .attention import (
    MultiHead,
    MultiHeadMap,
    attention_matrix,
    lemma_c2_jvp,
    mask_future,
    multihead_attention,
    self_attention,
)
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
    "adversarial",
    "attention_matrix",
    "bounds",
    "exact_local_lipschitz",
    "jacobian_matrix",
    "lemma_c2_jvp",
    "local_lipschitz",
    "mask_future",
    "multihead_attention",
    "self_attention",
    "weighted_operator_norm",
]

_LAZY = {"models", "data", "profiles", "experiments", "plotting"}


def __getattr__(name: str) -> ModuleType:
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'lipnb' has no attribute {name!r}")
