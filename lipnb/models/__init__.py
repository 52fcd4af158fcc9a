"""Real layers as maps: BERT, GPT-2 and Llama (SmolLM2) loaded offline or from the Hub, their attention as
closed-form maps (:mod:`lipnb.models.maps`), heads and quantisation. Imports :mod:`lipnb.core` and the
utilities.

``PUBLISHED`` lists what this floor publishes, each name with the module that holds it: what chapters and users
call (``lipnb.models.load(...)``, ``lipnb.models.attention_map(...)``), imported on first use."""

from __future__ import annotations

from ..lazy import lazy_modules, published_names

PUBLISHED: dict[str, tuple[str, ...]] = {
    "maps": ("KINDS", "UNMASKED_TWIN", "LayerMap", "MapKind", "attention_inputs", "attention_map", "family", "head_A",
             "head_matrices", "is_decoder", "layer_module", "num_layers"),
    "heads": ("attention_layernorm", "bias_perturbation_effect", "layernorm_activations", "per_head_lipschitz",
              "textbook_multihead"),
    "llama": ("aligned_input", "offset_matrices", "offset_spectra"),
    "loading": ("HUB_MODELS", "MODEL_NAMES", "OFFLINE_MODELS", "OfflineError", "load", "load_shared",
                "minilm_trained_length"),
    "quantization": ("attention_linears", "quantized_attention"),
    "titles": ("model_title",),
}
__all__ = sorted(published_names(__name__, PUBLISHED))
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
