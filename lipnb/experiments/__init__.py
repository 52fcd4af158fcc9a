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
    "benchmark": ("benchmark_provenance", "benchmark_record", "benchmark_table", "cpu_speedup", "default_call",
                  "error_percent", "lipnb_calls", "paper_profile_seconds", "PEER_TITLES", "PeerComparison",
                  "peer_comparisons", "relative_errors", "speedup_decomposition", "workload_name",
                  "workload_parts"),
    "benchmark_schema": ("WorkloadRun",),
    "bound_ratios": ("e3_bound_ratios",),
    "certificate": ("MAX_ITER", "certificate_audit", "certificate_counts", "certificate_flags"),
    "certificate_rounding": ("certificate_rounding_audit", "extended_rayleigh"),
    "charlm": ("CharLM", "kind_title", "ngram_bits_per_char"),
    "charlm_runs": ("CHARLM_KINDS", "CHARLM_RECORDS", "CHARLM_SETTINGS", "agnews_corpus", "charlm_baselines",
                    "charlm_curves", "charlm_kinds", "charlm_record", "charlm_seeds", "contractive_divisors",
                    "curve_table", "first_step_below", "logged_value", "loss_rises", "replay_charlm",
                    "replay_first_steps", "run_settings"),
    "code_audit": ("ADVERSARIAL_PANEL_SETTINGS", "PAPER_REAL_DATA_MAPS", "adversarial_corrections",
                   "decoder_tuple_panel", "dropout_runs", "estimators_on_real_text", "layer_map_variants",
                   "module_mask_distances", "published_loop_runs", "random_gpt2_loop_runs"),
    "estimator_accuracy": ("estimator_agreement", "estimator_convergence"),
    "float32_audit": ("Float32Only", "float32_saturated_audit", "saturated_head"),
    "growth_rates": ("rates_table",),
    "l2_bound_checks": ("lambert_grid_maxima", "optimised_input_ratios", "random_input_ratios", "scaled_heads"),
    "l2_tightness": ("dot_and_l2_sweep", "fitted_rates", "identity_head", "maximize_l2_lipschitz", "proof_start",
                     "query_scaled", "tightness_sweep"),
    "large_radius": ("selection_convergence",),
    "layernorm_radius": ("absorbed_bound_table", "layernorm_absorption_errors", "layernorm_token_table",
                         "normalization_windows"),
    "live_benchmark": ("LiveTiming", "closed_form_gaps", "live_speedup"),
    "long_context": ("FOCUS", "GPU_RECORD", "LONG_CONTEXT_MODEL", "agreement", "long_context_heads",
                     "long_context_layers", "long_context_record", "replay_long_context", "rounding_sensitivity",
                     "sink_terms"),
    "magnitudes": ("MAGNITUDES", "magnitude_exponents"),
    "masked": ("cesaro_matrix", "cesaro_norms", "cesaro_pair_ratios", "masked_chain_sweep", "masked_growth_sweep",
               "masked_mean_field_sweep"),
    "mean_field": ("LightAtom", "light_atom_sweep", "mean_field_bound_sweep", "two_dirac_finite_n", "two_dirac_sweep",
                   "wasserstein_ratios"),
    "mixed_start": ("NOISE_WEIGHT", "SubsampleGap", "concavity_ratios", "coordinate_tail", "crossing_failures",
                    "mixed_start_factor", "subsample_gap"),
    "multihead": ("bias_ascent_sweep", "layer_ladder", "lemma_3_8_ladder", "lemma_e_2_jvp", "theorem_e_3_per_head",
                  "without_biases"),
    "ngram": ("kneser_ney_bits_per_char", "kneser_ney_probabilities", "kneser_ney_window_bits_per_char"),
    "radius_regime": ("radius_scaling_table", "seed_sweep"),
    "random_start": ("chebyshev_spectrum", "lanczos_failure_bound", "power_failure_bound", "random_start_failures"),
    "real_text": ("layer_radii", "position_aliasing", "real_text_sweep", "real_text_table", "token_radius"),
    "residual_stack": ("cluster_centres", "cluster_counts", "rescaled_tokens", "separation_pairs", "stack_convergence",
                       "stack_log_norms"),
    "rotary": ("ALIGNED_INPUTS", "offset_gamma_table", "rotary_aligned_sweep", "rotary_layer_sweep"),
    "rounding": ("q4_1_effect", "q4_1_heads"),
    "secants": ("difference_quotients", "secant_ratios"),
    "stats": ("BREAK_MIN_JUMP", "BREAK_MIN_SIDE", "EXPONENT_MARGIN", "bootstrap_slope", "fit_line", "growth_fits",
              "lack_of_fit", "local_slopes", "mean_curve_slope", "power_law_break", "side", "side_phrase",
              "student_interval"),
    "synthetic": ("large_radius_sweep", "lemma_c_7_constants", "quadratic_growth_slopes", "synthetic_bound_sweep"),
    "theorem_3_3_proof": ("data_bound_table", "proof_steps"),
    "trained_length": ("AliasingTest", "SplitAttention", "aliasing_test", "median_difference_interval",
                       "split_attention"),
    "verdicts": ("BOOK_CORRECTIONS", "CORRECTION_KINDS", "VERDICTS", "bound_verdict", "classify_correction",
                 "correction_subject", "correction_titles", "count_verdicts", "drawn_constant", "drawn_verdict",
                 "interval_verdict"),
}
__all__ = sorted(published_names(__name__, PUBLISHED))
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
