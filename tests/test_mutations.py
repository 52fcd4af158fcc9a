"""Mutation test of Parts I and II: every bound and estimator the book relies on is guarded by a chapter's own
check, which fails when the implementation is wrong.

Each mutation edits one implementation of ``lipnb``: a wrapper makes a public function wrong (its result scaled
by 0.5 or 2, ``A`` swapped for ``Aᵀ``, the value bias dropped, a small drift added), or one line of its source
is replaced and the function recompiled (the closed-form Jacobian products of ``MultiHeadMap``, the Krylov
solvers' stopping test, a sweep). Under it, the chapter named runs its own code cells from an empty results
cache, and the check named must be the first to fail (the mechanism: ``tests/chapter_mutations.py``). No check
is copied here: a chapter whose check is weakened lets its mutation through, and this test fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from chapter_mutations import ChapterMutation, chapter_mutation_test

from lipnb.core import attention, bounds, dense, flow, jacobian, krylov, lipschitz, normalization
from lipnb.core.lipschitz import LipschitzResult
from lipnb.experiments import real_text


def _scaled(factor: float) -> Callable[[Callable], Callable]:
    return lambda original: lambda *args, **kwargs: original(*args, **kwargs) * factor


def _estimate_scaled(factor: float) -> Callable[[Callable], Callable]:
    """``local_lipschitz``'s value scaled, whether it returns the values or the detailed result."""

    def mutation(original: Callable) -> Callable:
        def mutated(*args: object, **kwargs: object) -> torch.Tensor | LipschitzResult:
            result = original(*args, **kwargs)
            if isinstance(result, LipschitzResult):
                return dataclasses.replace(result, value=result.value * factor)
            return result * factor

        return mutated

    return mutation


def _transposed_a(original: Callable) -> Callable:
    """``A -> Aᵀ`` in the second argument (every attention map and Jacobian of lipnb takes ``(X, A, ...)``)."""
    return lambda X, A, *args, **kwargs: original(X, A.mT, *args, **kwargs)


def _without_value_bias(original: Callable) -> Callable:
    return lambda X, heads, **kwargs: original(X, dataclasses.replace(heads, value_bias=None), **kwargs)


def _radius_scaled(original: Callable) -> Callable:
    def mutated(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        R, z = original(*args, **kwargs)
        return 0.5 * R, z

    return mutated


def _drifting(original: Callable) -> Callable:
    """A small error per step (``10⁻³`` per layer) added to the logarithm of the Grönwall product."""

    def mutated(*args: object, **kwargs: object) -> torch.Tensor:
        logs = original(*args, **kwargs)
        return logs - torch.arange(len(logs), dtype=logs.dtype) * 1e-3

    return mutated


def _plus_one(original: Callable) -> Callable:
    return lambda *args, **kwargs: original(*args, **kwargs) + 1


M = ChapterMutation
LEMMA_C2 = "masked=False: Lemma C.2's closed form equals forward-mode autodiff (relative difference)"
RATIO_3_3 = ("the ratio of the sharpened to the stated bound at n = 1e9 equals √((a²+1)/(4a²+1)), "
             "a = ||A|| R²")
RATIO_3_5 = ("A = -I: log(Theorem 3.5 / sharpened bound) is log((1 + 3a) / (1 + 2a + a e^(-a))) + a, "
             "a = ||A|| R², at every R")
TWO_DIRAC = "positive: Lip matches (1+γR²)e^(γR²)/2 to 1e-8 for γR² >= 10"
PROP_3_4 = "the dense constant is at least Proposition 3.4 in the case the rule chooses"
HARDY = "A = 0: the corrected bound is 2||V||, the supremum of ||V|| ||C_n|| over n (Hardy)"
CLOSED_FORM = "mha: the closed form equals the module"

MUTATIONS: dict[str, ChapterMutation] = {
    "self_attention uses Aᵀ": M(attention, "self_attention", _transposed_a, "06_mean_field",
                                "the 8-token sequence's constant is above 1.8 times the weighted norm"),
    "attention_matrix uses Aᵀ": M(attention, "attention_matrix", _transposed_a, "01_self_attention", LEMMA_C2),
    "lemma_c_2_jvp uses Aᵀ": M(jacobian, "lemma_c_2_jvp", _transposed_a, "01_self_attention", LEMMA_C2),
    "multihead_attention drops the value bias": M(
        attention, "multihead_attention", _without_value_bias, "08_multihead",
        "random b_K: textbook formula = score-bias form, relative error below 1e-12"),
    "local_lipschitz x0.5": M(lipschitz, "local_lipschitz", _estimate_scaled(0.5), "01_self_attention",
                              "every secant / sup of Lip_X on its segment is at most 1"),
    "local_lipschitz x2": M(lipschitz, "local_lipschitz", _estimate_scaled(2.0), "01_self_attention",
                            "along the top singular direction the shortest secant reaches the supremum to 1e-3"),
    "exact_local_lipschitz x2": M(dense, "exact_local_lipschitz", _scaled(2.0), "01_self_attention",
                                  "single head, lanczos: the estimate equals the dense SVD's"),
    "weighted_operator_norm x2": M(dense, "weighted_operator_norm", _scaled(2.0), "06_mean_field",
                                   "Lip_X(f) = max(weighted norm, own-query terms of repeated tokens), to 1e-10"),
    "lemma_c_2_term_matrices uses Aᵀ": M(jacobian, "lemma_c_2_term_matrices", _transposed_a, "03_sqrt_n_bound",
                                         "uniform in the ball: the three terms add up to D_X f"),
    "theorem_3_3 x0.5": M(bounds, "theorem_3_3", _scaled(0.5), "03_sqrt_n_bound", RATIO_3_3),
    "theorem_3_3 x2": M(bounds, "theorem_3_3", _scaled(2.0), "03_sqrt_n_bound", RATIO_3_3),
    "theorem_e_3 x0.5": M(bounds, "theorem_e_3", _scaled(0.5), "03_sqrt_n_bound", RATIO_3_3),
    "theorem_e_3_sharpened x0.5": M(bounds, "theorem_e_3_sharpened", _scaled(0.5), "03_sqrt_n_bound", RATIO_3_3),
    "lemma_3_8 x0.5": M(bounds, "lemma_3_8", _scaled(0.5), "08_multihead",
                        "the ball bound is sum_h ||W_h|| × Theorem E.3 of head h, summed here"),
    "theorem_3_5 x0.5": M(bounds, "theorem_3_5", _scaled(0.5), "06_mean_field", RATIO_3_5),
    "log_theorem_3_5_sharpened + 1": M(bounds, "log_theorem_3_5_sharpened", _plus_one, "06_mean_field", RATIO_3_5),
    "theorem_c_3 x0.5": M(bounds, "theorem_c_3", _scaled(0.5), "03_sqrt_n_bound",
                          "Lemma C.7 input, masked=False: Lip ≤ Theorem C.3"),
    "theorem_c_3 x2": M(bounds, "theorem_c_3", _scaled(2.0), "03_sqrt_n_bound",
                        "at the Lemma C.7 input, Lip / Theorem C.3 lies in [0.5, 1]"),
    "lemma_c_7 x0.5": M(bounds, "lemma_c_7", _scaled(0.5), "04_tightness",
                        "Lemma C.7's bound is attained: min exact / bound ≤ 1 + 1e-3"),
    "lemma_c_7 x2": M(bounds, "lemma_c_7", _scaled(2.0), "04_tightness",
                      "the dense constant is at least Lemma C.7's bound at every input"),
    "lemma_c_7_sharpened x0.5": M(bounds, "lemma_c_7_sharpened", _scaled(0.5), "04_tightness",
                                  "the sharper bound is attained: min exact / sharper ≤ 1 + 1e-6"),
    "proposition_3_4 x0.5": M(bounds, "proposition_3_4", _scaled(0.5), "04_tightness",
                              "Proposition 3.4 is attained: min exact / bound ≤ 1 + 1e-3"),
    "proposition_3_4 x2": M(bounds, "proposition_3_4", _scaled(2.0), "04_tightness", PROP_3_4),
    "gamma x2": M(bounds, "gamma", _scaled(2.0), "04_tightness", PROP_3_4),
    "theorem_3_7_limit x2": M(bounds, "theorem_3_7_limit", _scaled(2.0), "05_large_radius",
                              "random X, masked=False: Lip at the largest R equals Theorem 3.7's limit"),
    "two_dirac_constant x0.5": M(bounds, "two_dirac_constant", _scaled(0.5), "06_mean_field", TWO_DIRAC),
    "two_dirac_constant x2": M(bounds, "two_dirac_constant", _scaled(2.0), "06_mean_field", TWO_DIRAC),
    "theorem_3_5_sharpened x0.5": M(bounds, "theorem_3_5_sharpened", _scaled(0.5), "06_mean_field",
                                    "A = -I, R² = 300: the two-Dirac constant is a quarter of the sharpened bound"),
    "theorem_3_5_sharpened x2": M(bounds, "theorem_3_5_sharpened", _scaled(2.0), "06_mean_field",
                                  "the largest measured Lip / sharpened bound over 80 inputs is within 0.3-1"),
    "masked_mean_field_bound x0.5": M(bounds, "masked_mean_field_bound", _scaled(0.5), "07_masked", HARDY),
    "masked_mean_field_bound x2": M(bounds, "masked_mean_field_bound", _scaled(2.0), "07_masked", HARDY),
    "normalization_radius x0.5": M(normalization, "normalization_radius", _radius_scaled, "02_normalization",
                                   "the exact radius R equals the best point of a fine scan of the circle"),
    "normalization_radius_bound x0.5": M(normalization, "normalization_radius_bound", _scaled(0.5),
                                         "02_normalization", "R is at most the simple bound √d max|γ| + |β|"),
    "flow_gronwall_log drifts": M(bounds, "flow_gronwall_log", _drifting, "09_flow",
                                  "top, 1e-6: the Grönwall factor is the product of (1 + h Λ_k), multiplied out "
                                  "layer by layer"),
    "flow_radius_bound x2": M(bounds, "flow_radius_bound", _scaled(2.0), "09_flow",
                              "V = I: at the last layer the largest token reaches more than 0.8 of the bound"),
    "attention_flow x2": M(flow, "attention_flow", _scaled(2.0), "09_flow",
                           "V = I, A = I: max_i |x_i^k| ≤ (1 + h||V||)^k r0 at every layer k ≥ 1"),
    # one line of an implementation's source replaced
    "MultiHeadMap jvp: covariance term with the wrong sign": M(
        jacobian.AttentionLinearization, "jvp",
        ("dO.sub_(T.sum(-1, keepdim=True) * self.Oh)", "dO.add_(T.sum(-1, keepdim=True) * self.Oh)"),
        "10_performance", CLOSED_FORM),
    "MultiHeadMap vjp: scores' cotangent not centred": M(
        jacobian.AttentionLinearization, "vjp",
        ("dS.sub_((dO * self.Oh).sum(-1, keepdim=True)).mul_(self.P)", "dS.mul_(self.P)"),
        "10_performance", CLOSED_FORM),
    "lanczos: stops on a residual of 1, whatever the tolerance": M(
        krylov, "lanczos",
        ("converged = _stops(res, error, tol, rtol) | invariant",
         "converged = _stops(res, error, 1.0, rtol) | invariant"),
        "01_self_attention", "along the top singular direction the shortest secant reaches the supremum to 1e-3"),
    # the final residual, recomputed after the solver stops, refuses the false stop
    "power_iteration: stops on a residual of 1, whatever the tolerance": M(
        krylov, "power_iteration",
        ("converged = _stops(res, error, tol, rtol) | (th <= 0)",
         "converged = _stops(res, error, 1.0, rtol) | (th <= 0)"),
        "01_self_attention", "single head, power: every input converged"),
    "real_text_sweep: column sums of P taken over the wrong axis": M(
        real_text, "_bound_columns", ("P.sum(-2).flatten(1)", "P.sum(-1).flatten(1)"),
        "03_sqrt_n_bound", "the sink's exponent interval lies above the local constant's"),
}

test_mutation_fails_the_chapters_check = chapter_mutation_test(MUTATIONS)
