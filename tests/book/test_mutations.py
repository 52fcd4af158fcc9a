"""Mutation test of Parts I and II: every bound and estimator the book relies on is guarded by a chapter's own
check, which fails when the implementation is wrong.

Each mutation edits one implementation of ``lipnb``: a wrapper makes a public function wrong (its result scaled
by 0.5 or 2, ``A`` swapped for ``Aᵀ``, the value bias dropped, a small drift added), or one line of its source
is replaced and the function recompiled (the closed-form Jacobian products of ``MultiHeadMap``, the Krylov
solvers' stopping test, a sweep). Under it, the chapter named runs its own code cells from an empty results
cache, and the check named must be the first to fail (the mechanism: ``tests/book/chapter_mutations.py``). No check
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
LEMMA_C2 = "lemma-c2-closed-form"
RATIO_3_3 = "sharpened-ratio"
RATIO_3_5 = "thm-3-5-log-ratio"
TWO_DIRAC = "two-dirac-constant"
PROP_3_4 = "prop-3-4-below-dense"
HARDY = "hardy-supremum"
CLOSED_FORM = "closed-form-equals-module"

MUTATIONS: dict[str, ChapterMutation] = {
    "self_attention uses Aᵀ": M(attention, "self_attention", _transposed_a, "mean_field",
                                "eight-token-above-weighted"),
    "attention_matrix uses Aᵀ": M(attention, "attention_matrix", _transposed_a, "self_attention", LEMMA_C2),
    "lemma_c_2_jvp uses Aᵀ": M(jacobian, "lemma_c_2_jvp", _transposed_a, "self_attention", LEMMA_C2),
    "multihead_attention drops the value bias": M(
        attention, "multihead_attention", _without_value_bias, "biases",
        "score-bias-form"),
    "local_lipschitz x0.5": M(lipschitz, "local_lipschitz", _estimate_scaled(0.5), "self_attention",
                              "secant-below-sup"),
    "local_lipschitz x2": M(lipschitz, "local_lipschitz", _estimate_scaled(2.0), "self_attention",
                            "secant-reaches-sup"),
    "exact_local_lipschitz x2": M(dense, "exact_local_lipschitz", _scaled(2.0), "self_attention",
                                  "estimate-equals-dense"),
    # the two-atom example comes first in the chapter: its weighted norm is the first to double
    "weighted_operator_norm x2": M(dense, "weighted_operator_norm", _scaled(2.0), "mean_field",
                                   "eight-token-above-weighted"),
    "lemma_c_2_term_matrices uses Aᵀ": M(jacobian, "lemma_c_2_term_matrices", _transposed_a, "sqrt_n_bound",
                                         "three-terms-add-up"),
    "theorem_3_3 x0.5": M(bounds, "theorem_3_3", _scaled(0.5), "sqrt_n_bound", RATIO_3_3),
    "theorem_3_3 x2": M(bounds, "theorem_3_3", _scaled(2.0), "sqrt_n_bound", RATIO_3_3),
    "theorem_e_3 x0.5": M(bounds, "theorem_e_3", _scaled(0.5), "sqrt_n_bound", RATIO_3_3),
    "theorem_e_3_sharpened x0.5": M(bounds, "theorem_e_3_sharpened", _scaled(0.5), "sqrt_n_bound", RATIO_3_3),
    "lemma_3_8 x0.5": M(bounds, "_lemma_3_8", _scaled(0.5), "multihead",
                        "ball-bound-sum"),
    "theorem_3_5 x0.5": M(bounds, "theorem_3_5", _scaled(0.5), "mean_field_bound", RATIO_3_5),
    "log_theorem_3_5_sharpened + 1": M(bounds, "log_theorem_3_5_sharpened", _plus_one, "mean_field_bound",
                                       RATIO_3_5),
    "theorem_c_3 x0.5": M(bounds, "theorem_c_3", _scaled(0.5), "sqrt_n_bound",
                          "thm-c3-holds"),
    "theorem_c_3 x2": M(bounds, "theorem_c_3", _scaled(2.0), "sqrt_n_bound",
                        "thm-c3-attained"),
    "lemma_c_7 x0.5": M(bounds, "lemma_c_7", _scaled(0.5), "tightness",
                        "lemma-c7-attained"),
    "lemma_c_7 x2": M(bounds, "lemma_c_7", _scaled(2.0), "tightness",
                      "lemma-c7-below-dense"),
    "lemma_c_7_sharpened x0.5": M(bounds, "lemma_c_7_sharpened", _scaled(0.5), "tightness",
                                  "sharper-attained"),
    "proposition_3_4 x0.5": M(bounds, "proposition_3_4", _scaled(0.5), "tightness",
                              "prop-3-4-attained"),
    "proposition_3_4 x2": M(bounds, "proposition_3_4", _scaled(2.0), "tightness", PROP_3_4),
    "gamma x2": M(bounds, "gamma", _scaled(2.0), "tightness", PROP_3_4),
    "theorem_3_7_limit x2": M(bounds, "theorem_3_7_limit", _scaled(2.0), "large_radius",
                              "thm-3-7-limit"),
    "two_dirac_constant x0.5": M(bounds, "two_dirac_constant", _scaled(0.5), "two_diracs", TWO_DIRAC),
    "two_dirac_constant x2": M(bounds, "two_dirac_constant", _scaled(2.0), "two_diracs", TWO_DIRAC),
    "theorem_3_5_sharpened x0.5": M(bounds, "theorem_3_5_sharpened", _scaled(0.5), "mean_field_bound",
                                    "two-dirac-quarter"),
    "theorem_3_5_sharpened x2": M(bounds, "theorem_3_5_sharpened", _scaled(2.0), "mean_field_bound",
                                  "sharpened-ratio-band"),
    "masked_mean_field_bound x0.5": M(bounds, "masked_mean_field_bound", _scaled(0.5), "masked_mean_field", HARDY),
    "masked_mean_field_bound x2": M(bounds, "masked_mean_field_bound", _scaled(2.0), "masked_mean_field", HARDY),
    "normalization_radius x0.5": M(normalization, "normalization_radius", _radius_scaled, "normalization",
                                   "radius-equals-scan"),
    "normalization_radius_bound x0.5": M(normalization, "normalization_radius_bound", _scaled(0.5),
                                         "normalization", "radius-simple-bound"),
    "flow_gronwall_log drifts": M(bounds, "flow_gronwall_log", _drifting, "flow",
                                  "gronwall-product"),
    "flow_radius_bound x2": M(bounds, "flow_radius_bound", _scaled(2.0), "flow",
                              "flow-radius-reached"),
    # the depth sweep opens the chapter: a doubled stack is first caught by Euler's order
    "attention_flow x2": M(flow, "attention_flow", _scaled(2.0), "flow",
                           "stack-error-halves"),
    # one line of an implementation's source replaced
    "MultiHeadMap jvp: covariance term with the wrong sign": M(
        jacobian.AttentionLinearization, "jvp",
        ("dO.sub_(T.sum(-1, keepdim=True) * self.Oh)", "dO.add_(T.sum(-1, keepdim=True) * self.Oh)"),
        "performance", CLOSED_FORM),
    "MultiHeadMap vjp: scores' cotangent not centred": M(
        jacobian.AttentionLinearization, "vjp",
        ("dS.sub_((dO * self.Oh).sum(-1, keepdim=True)).mul_(self.P)", "dS.mul_(self.P)"),
        "performance", CLOSED_FORM),
    "lanczos: stops on a residual of 1, whatever the tolerance": M(
        krylov, "lanczos",
        ("converged = _stops(res, error, tol, rtol) | invariant",
         "converged = _stops(res, error, 1.0, rtol) | invariant"),
        "self_attention", "secant-reaches-sup"),
    # the final residual, recomputed after the solver stops, refuses the false stop
    "power_iteration: stops on a residual of 1, whatever the tolerance": M(
        krylov, "power_iteration",
        ("converged = _stops(res, error, tol, rtol) | (th <= 0)",
         "converged = _stops(res, error, 1.0, rtol) | (th <= 0)"),
        "self_attention", "estimate-converged"),
    "real_text_sweep: column sums of P taken over the wrong axis": M(
        real_text, "_bound_columns", ("P.sum(-2).flatten(1)", "P.sum(-1).flatten(1)"),
        "sqrt_n_real_text", "sink-exponent-above"),
}

test_mutation_fails_the_chapters_check = chapter_mutation_test(MUTATIONS)
