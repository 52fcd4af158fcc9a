"""lipnb: the numerical core of the executable book *How Smooth Is Attention?*, in floors.

Each floor imports only from the floors below it (``import-linter`` holds this, ``[tool.importlinter]`` in
``pyproject.toml``):

* :mod:`lipnb.experiments`: the sweeps of each part of the book, their statistics, the language-model and
  long-context runs, the benchmark records;
* :mod:`lipnb.paper`: what the papers and their published code say or do (numbers, settings, the published
  estimator);
* :mod:`lipnb.models`: real layers (BERT, GPT-2, Llama/SmolLM2) as maps with closed-form Jacobians, loading,
  heads, quantisation;
* :mod:`lipnb.core`: the mathematics (maps, Jacobians, the Krylov solvers and the estimator, bounds, inputs,
  measures, L2 attention);
* at the top of the package (the ground floor), what every floor uses: argument checks (:mod:`lipnb.arguments`),
  texts (:mod:`lipnb.data`), run profiles (:mod:`lipnb.profiles`), the results cache (:mod:`lipnb.results`),
  counts in words (:mod:`lipnb.words`);
* above every numerical floor, the presentation floor :mod:`lipnb.report`: what a chapter does with its numbers
  (state, check, tabulate, draw).

The published surface: the names users call (:func:`local_lipschitz`, the maps, the profiles and texts) are here;
each floor publishes its own in its ``PUBLISHED`` map (``from lipnb.core import theorem_3_3``), and chapters import
nothing else. Every module is reachable as an attribute (``lipnb.core.krylov``) and imported on first use, so
``import lipnb`` loads neither ``transformers`` nor ``pandas``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .core.attention import MultiHead, attention_matrix, mask_future, multihead_attention, self_attention
from .core.dense import exact_local_lipschitz, jacobian_matrix, weighted_operator_norm
from .core.jacobian import MultiHeadMap, lemma_c_2_jvp
from .core.lipschitz import LipschitzResult, NotConvergedWarning, local_lipschitz
from .lazy import lazy_modules, published_names

__all__ = [
    "LipschitzResult",
    "MultiHead",
    "MultiHeadMap",
    "NotConvergedWarning",
    "__version__",
    "attention_matrix",
    "exact_local_lipschitz",
    "jacobian_matrix",
    "lemma_c_2_jvp",
    "local_lipschitz",
    "mask_future",
    "multihead_attention",
    "self_attention",
    "weighted_operator_norm",
]

# The ground floor's published names, imported on first use.
PUBLISHED: dict[str, tuple[str, ...]] = {
    "data": ("DATASETS", "ag_news_texts", "alice_text", "dataset_text", "dataset_title", "on_texts",
             "token_sequences"),
    "profiles": ("default_device", "profile", "set_profile"),
    "results": ("cache_dir",),
}
__all__ += sorted(published_names(__name__, PUBLISHED))
# Every module and floor of the package, found on disk so that none is left out: imported on first access.
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
