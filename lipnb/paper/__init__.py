"""What the papers and their published code say and do: the published numbers with their source lines,
the published experiments' settings and their estimator, one home each. Imports the floors below.

``PUBLISHED`` lists what this floor publishes, each name with the module that holds it, imported on first use."""

from __future__ import annotations

from ..lazy import lazy_modules, published_names

PUBLISHED: dict[str, tuple[str, ...]] = {
    "paper_numbers": ("PUBLISHED", "PUBLISHED_NUMBERS", "number"),
    "paper_settings": ("ADVERSARIAL_RANDOM_GPT2", "CORRECTIONS", "REAL_DATA_RANDOM_GPT2", "decoder_output_tuple_map",
                       "paper_random_gpt2", "random_gpt2_adversarial_panel", "random_gpt2_attention",
                       "random_gpt2_real_data_panel", "training_inputs"),
    "published": ("SCRIPT_SETTINGS", "first_step_stop_probability", "paper_power_iteration", "published_A",
                  "published_A_cosines", "published_closed_form", "published_estimator", "published_run"),
}
__all__ = sorted(published_names(__name__, PUBLISHED))
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
