"""The book's experiments: the sweeps of Parts I-III with their statistics, the recorded runs (language
models, long contexts, benchmarks) and the verdicts of the results-at-a-glance page. The top numerical floor.

``PUBLISHED`` lists what this floor publishes, each name with the module that holds it: what chapters and users
call (``from lipnb.experiments import real_text_table``), imported on first use. Everything else is the floor's
own."""

from __future__ import annotations

from ..lazy import lazy_modules, published_names

PUBLISHED: dict[str, tuple[str, ...]] = {
    "adversarial": ("adversarial_layers", "adversarial_radii", "adversarial_sweep", "adversarial_table",
                    "head_gamma_table"),
    "adversarial_growth": ("lemma_c_7_table", "sqrt_n_growth_table", "sqrt_n_window_table"),
    "benchmark": ("benchmark_record", "cpu_speedup", "decomposition", "default_call", "lipnb_calls",
                  "paper_profile_seconds", "provenance", "relative_errors", "table"),
    "benchmark_schema": ("WorkloadRun",),
    "certificate": ("MAX_ITER", "certificate_audit", "certificate_counts", "certificate_flags"),
    "charlm": ("CharLM", "ngram_bits_per_char"),
    "charlm_runs": ("KINDS", "RECORDS", "SETTINGS", "agnews_corpus", "charlm_record", "first_below", "kinds_of",
                    "replay_charlm", "rises", "run_settings", "seeds_of", "value_at"),
    "estimator_accuracy": ("estimator_agreement", "estimator_convergence"),
    "growth_rates": ("rates_table",),
    "large_radius": ("selection_convergence",),
    "layernorm_radius": ("absorbed_bound_table", "layernorm_absorption_errors", "layernorm_token_table",
                         "normalization_windows"),
    "l2_tightness": ("dot_and_l2_sweep", "fitted_rates", "identity_head", "maximize_l2_lipschitz", "proof_start",
                     "query_scaled", "tightness_sweep"),
    "long_context": ("FOCUS", "GPU_RECORD", "MODEL", "agreement", "head_table", "layer_table", "long_context_record",
                     "replay_long_context", "rounding_sensitivity", "sink_terms"),
    "ngram": ("kneser_ney_bits_per_char",),
    "real_text": ("PAPER", "position_aliasing", "real_text_sweep", "real_text_table", "token_radius"),
    "secants": ("difference_quotients", "secant_ratios"),
    "stats": ("BREAK_MIN_JUMP", "BREAK_MIN_SIDE", "bootstrap_slope", "fit_line", "growth_fits", "lack_of_fit",
              "local_slopes", "power_law_break", "side", "student_interval"),
    "synthetic": ("large_radius_sweep", "lemma_c_7_constants", "quadratic_growth_slopes", "synthetic_bound_sweep"),
    "theorem_3_3_proof": ("data_bound_table", "proof_steps"),
    "verdicts": ("CORRECTION_TARGETS", "VERDICTS", "bound_verdict", "count_verdicts", "drawn_constant",
                 "drawn_verdict", "interval_verdict"),
}
__all__ = sorted(published_names(__name__, PUBLISHED))
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
