"""The numerical core: maps, Jacobians, solvers, the estimator, bounds and inputs (Castin et al., Secs. 2-4;
Kim et al., Sec. 3). Imports only the top-level utilities of :mod:`lipnb`.

``PUBLISHED`` lists what this floor publishes, each name with the module that holds it: what chapters and users
call (``from lipnb.core import theorem_3_3``), imported on first use. Everything else is the floor's own."""

from __future__ import annotations

from ..lazy import lazy_modules, published_names

PUBLISHED: dict[str, tuple[str, ...]] = {
    "attention": ("attention_matrix", "causal_mask", "mask_future", "multihead_attention", "self_attention",
                  "single_head", "MultiHead"),
    "certify": ("PROBE_FACTOR",),
    "bounds": ("argmax_counts", "flow_gronwall_log", "flow_radius_bound", "gamma", "lemma_c_7", "lemma_c_7_sharpened",
               "log_theorem_3_5", "log_theorem_3_5_sharpened", "masked_mean_field_bound", "multihead_bound",
               "multihead_data_bound", "proposition_3_4", "theorem_3_3", "theorem_3_5", "theorem_3_5_sharpened",
               "theorem_3_7_limit", "theorem_c_3", "theorem_c_3_terms", "theorem_e_3", "theorem_e_3_sharpened",
               "two_dirac_constant"),
    "dense": ("exact_local_lipschitz", "jacobian_matrix", "weighted_operator_norm"),
    "flow": ("attention_flow", "attention_flow_rk4", "cluster_labels", "flow_jacobians"),
    "inputs": ("adversarial_case", "argmax_configuration", "ball_tokens", "head_spectra", "lemma_c_7_input",
               "maximize_local_lipschitz", "proposition_3_6_measure", "quadratic_growth_input", "random_head",
               "real_eigenpairs", "repeat_tokens"),
    "invertible": ("contraction_coefficient", "fixed_point_inverse", "geometric_rate", "residual_map"),
    "jacobian": ("MultiHeadMap", "attention_covariances", "jacobian_block_norms", "lemma_c_2_jvp",
                 "lemma_c_2_term_matrices", "score_gaps"),
    "krylov": ("failure_epsilon", "interval_products"),
    "l2_self_attention": ("L2AttentionMap", "L2Heads", "l2_attention", "random_l2_heads", "untied_blowup_input"),
    "l2_bounds": ("exact_local_lipschitz_inf", "phi_inverse", "softmax_distance_sum", "theorem_3_2_inf",
                  "theorem_3_2_two", "theorem_3_2_two_as_printed"),
    "lipschitz": ("LipschitzResult", "NotConvergedWarning", "local_lipschitz"),
    "measures": ("conditional_w2", "masked_mean_field", "masked_mean_field_ratio", "own_query_norms",
                 "repeated_token_lipschitz", "synchronous_lipschitz", "wasserstein2_empirical",
                 "weighted_attention_lipschitz"),
    "normalization": ("absorb_normalization", "layer_norm", "normalization_radius", "normalization_radius_bound",
                      "normalize_tokens", "rms_norm"),
}
__all__ = sorted(published_names(__name__, PUBLISHED))
__getattr__, __dir__ = lazy_modules(__name__, __file__, globals(), PUBLISHED)
