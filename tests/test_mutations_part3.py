"""Mutation test of Part III (chapters 31, 33 and 35): each chapter check can fail.

Each mutation replaces one formula of ``lipnb.core.l2_attention``, ``lipnb.core.l2_bounds``,
``lipnb.core.invertible`` or ``lipnb.charlm`` (with ``monkeypatch``) by a wrong one: a factor dropped, a power
of a weight norm changed, the Lambert-W argument of the paper's print, a sign flipped. ``MUTATIONS`` names the
*catchers*: functions below that repeat a chapter's check with the same lipnb calls and the same ``lipnb.report.check``
comparison (the chapter and claim are in each docstring). The test asserts that every catcher listed fails
(``check`` raises ``AssertionError``) under the mutation, and ``test_catchers_pass`` that each holds without.

Mutations that no chapter check catches are listed in ``SURVIVORS`` with the reason: each is a check the
book does not make.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from conftest import mutate, mutation_tests
from scipy.special import lambertw

from lipnb import charlm, charlm_runs
from lipnb.core import invertible, l2_bounds
from lipnb.core.dense import exact_local_lipschitz, jacobian_matrix
from lipnb.core.l2_attention import L2AttentionMap, L2Heads, L2Linearization, l2_attention, random_l2_heads
from lipnb.core.l2_bounds import exact_local_lipschitz_inf, softmax_distance_sum
from lipnb.experiments.l2_tightness import identity_head, maximize_l2_lipschitz, proof_start
from lipnb.report import check

f64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pairs() -> torch.Tensor:
    """Chapter 31's two heads of width 2 on D = 4: W^{Q,h} = W^{V,h} = the h-th pair of columns of I_4."""
    return torch.eye(4, dtype=f64).view(4, 2, 2).permute(1, 0, 2).contiguous()


# ----------------------------------------------------------------------------- catchers


def closed_form_matches_autograd() -> None:
    """Chapter 31, "the map": the closed-form JVP and VJP equal ``torch.func``'s (relative error 1e-13)."""
    X = 2 * torch.randn(4, 7, 6, dtype=f64, generator=_gen(0))
    worst = []
    for tied in (True, False):
        heads = random_l2_heads(6, 2, tied=tied, scale=1.5, seed=1)
        lin = L2AttentionMap(heads).linearize(X)
        E, G = torch.randn_like(X), torch.randn_like(lin.output)
        _, jv = torch.func.jvp(lambda Z, heads=heads: l2_attention(Z, heads), (X,), (E,))
        _, pullback = torch.func.vjp(lambda Z, heads=heads: l2_attention(Z, heads), X)
        worst.append(max(float((lin.jvp(E) - jv).abs().max() / jv.abs().max()),
                         float((lin.vjp(G) - pullback(G)[0]).abs().max() / pullback(G)[0].abs().max())))
    check.below("tied and untied closed forms equal autograd's products (relative error)", worst, 1e-13)


def lambert_grid_maximum() -> None:
    """Chapter 31, Lemma (eq-lambert): the grid maximum of the proof's sum equals ``phi_inverse(N - 1)``."""
    z = torch.linspace(0, 12, 240_001, dtype=f64)
    Ns = (2, 3, 10)
    best = [float(softmax_distance_sum(z[:, None].expand(-1, N - 1)).max()) for N in Ns]
    check.close("the grid maximum equals W0((N-1)/e) for every N", best,
                [float(l2_bounds.phi_inverse(N - 1)) for N in Ns], rtol=1e-6)


def _at_scale(heads: L2Heads, s: float) -> tuple[float, float, float]:
    Xs = torch.randn(64, 4, 4, dtype=f64, generator=_gen(0))
    h = L2Heads(Q=s * heads.Q, V=heads.V, W=heads.W)
    return (float(exact_local_lipschitz(L2AttentionMap(h), Xs / s).max()),
            float(l2_bounds.theorem_3_2_two_as_printed(h, 4)), float(l2_bounds.theorem_3_2_two(h, 4, sharpened=True)))


def corrected_two_norm_bound_at_every_scale() -> None:
    """Chapter 31, "the power of |W^Q|": the corrected bound holds at every scale of the query weights."""
    base = random_l2_heads(4, 1, seed=0)
    rows = [_at_scale(base, s) for s in (1.0, 8.0)]
    check.below("the corrected bound holds at every scale (largest Lip_X / bound)", max(r[0] / r[2] for r in rows),
                1.0)


def printed_two_norm_bound_is_beaten() -> None:
    """Chapter 31, the counterexample: a heavy-tailed head beats the 2-norm bound as Kim et al. print it."""
    base = random_l2_heads(4, 1, seed=0)
    g = _gen(0)
    cauchy = torch.randn(1, 4, 4, generator=g, dtype=f64) / torch.randn(1, 4, 4, generator=g, dtype=f64)
    lip, printed, _ = _at_scale(L2Heads(Q=cauchy, V=base.V, W=base.W), 1.0)
    check.above("this input beats Kim et al.'s printed 2-norm bound", lip / printed, 1.0, strict=True)


def _optimised(norm: str) -> tuple[float, float]:
    """Chapter 31, "checking both bounds": the ratio reached by optimised inputs (N = 4), at unit and scaled weights."""
    heads, N = L2Heads(Q=_pairs(), V=_pairs()), 4
    starts = torch.cat([torch.randn(3, N, 4, dtype=f64, generator=_gen(4)), proof_start(heads, 3, N, seed=N)])
    X, best = maximize_l2_lipschitz(heads, starts, norm, steps=60)
    scaled = L2Heads(Q=3 * _pairs(), V=2 * _pairs(), W=1.5 * torch.eye(4, dtype=f64))
    if norm == "inf":
        return (float(best.max() / l2_bounds.theorem_3_2_inf(heads, N)),
                float(exact_local_lipschitz_inf(L2AttentionMap(scaled), X / 3).max()
                      / l2_bounds.theorem_3_2_inf(scaled, N)))
    return (float(best.max() / l2_bounds.theorem_3_2_two(heads, N, sharpened=True)),
            float(exact_local_lipschitz(L2AttentionMap(scaled), X / 3).max()
                  / l2_bounds.theorem_3_2_two(scaled, N, sharpened=True)))


def infinity_bound_reached() -> None:
    """Chapter 31: optimised inputs reach 0.6 to 1 of the ∞-norm bound."""
    check.between("optimised inputs reach 0.6 to 1 of the ∞-norm bound", _optimised("inf")[0], 0.6, 1.0)


def bounds_scale_like_the_map() -> None:
    """Chapter 31: with W^Q, W^V, W^O scaled by 3, 2, 1.5 both bounds keep their ratio at the rescaled inputs."""
    pairs = [_optimised(norm) for norm in ("2", "inf")]
    check.close("with W^Q, W^V, W^O scaled by 3, 2, 1.5 both bounds keep their ratio at the rescaled inputs",
                [p[1] for p in pairs], [p[0] for p in pairs], rtol=1e-6)


def inversion_rate_is_the_spectral_radius() -> None:
    """Chapter 33: the fixed-point iteration's measured rate is c·ϱ(D_X F) (ratio within 0.8-1.02), and
    c·Lip_X(F) ≤ c·B = 0.9 at optimised inputs."""
    heads, N = identity_head(2), 8
    F = L2AttentionMap(heads)
    c = invertible.contraction_coefficient(l2_bounds.theorem_3_2_two(heads, N, sharpened=True), 0.9)
    worst, _ = maximize_l2_lipschitz(heads, proof_start(heads, 2, N, seed=1), "2", steps=60)
    X = torch.cat([torch.randn(2, N, 2, dtype=f64, generator=_gen(33)), worst])
    inversion = invertible.fixed_point_inverse(F, invertible.residual_map(F, c)(X), c, iterations=60, X=X)
    rate = invertible.geometric_rate(inversion.errors)
    spectral = c * torch.linalg.eigvals(jacobian_matrix(F, X)).abs().amax(-1)
    check.between("measured rate / c·ϱ(D_X F) within 0.8-1.02 for every input", torch.nan_to_num(rate / spectral),
                  0.8, 1.02)
    check.below("Theorem 3.2 (2-norm, sharpened) holds at the optimised inputs: c·Lip_X(F) ≤ c·B = 0.9",
                c * exact_local_lipschitz(F, X), 0.9)


def replay_matches_record() -> None:
    """Chapter 35: the first steps of the recorded runs, re-run, match the committed curves."""
    record = charlm_runs.load_record()
    curves = {(run["kind"], run["depth"]): run["rows"] for run in record["runs"]}
    for kind in ("l2", "l2-contractive"):
        rows = charlm_runs.replay(kind, 1, charlm_runs.SETTINGS["log_every"])
        ref = curves[kind, 1][0]
        check.close(f"{kind}, depth 1: the re-run first steps match the record (bits/char)",
                    [rows[0]["train_bpc"], rows[0]["valid_bpc"]], [ref["train_bpc"], ref["valid_bpc"]], atol=1e-5)


def unigram_matches_counts() -> None:
    """Chapter 35: the unigram baseline equals add-one-smoothed character counts computed independently."""
    ids = torch.tensor([0, 1, 1, 2, 2, 2, 3, 0, 1, 2] * 7)
    counts = torch.bincount(ids, minlength=5).double() + 1
    expected = float(-(counts / counts.sum()).log2()[ids].mean())
    check.close("the unigram baseline equals the smoothed counts", charlm.ngram_bits_per_char(ids, ids, 5, 1), expected,
                rtol=1e-12)


# ----------------------------------------------------------------------------- mutations


def _phi_printed(_: Callable) -> Callable:
    """The paper's print: φ⁻¹(N-1) = W₀(N/e), i.e. φ⁻¹(y) = W₀((y+1)/e)."""
    return lambda y: torch.as_tensor(lambertw((float(y) + 1) / math.e).real, dtype=f64)


def _phi_without_e(_: Callable) -> Callable:
    """φ⁻¹(y) = W₀(y): the division by e dropped."""
    return lambda y: torch.as_tensor(lambertw(float(y)).real, dtype=f64)


def _jvp_without_key_term(_: Callable) -> Callable:
    """The closed-form JVP with the ``-<k_j, dk_j>`` term of ``dS`` dropped."""
    def jvp(self: L2Linearization, E: torch.Tensor) -> torch.Tensor:
        dq, dk, dv = self._project(E.to(self.P.dtype))
        dS = 2 / self.heads.tau * (dq @ self.k.mT + self.q @ dk.mT)
        T = self.P * dS
        dO = T @ self.v - T.sum(-1, keepdim=True) * self.Oh + self.P @ dv
        B, H, n, m = dO.shape
        cat = dO.transpose(1, 2).reshape(B, n, H * m)
        return cat if self.heads.W is None else cat @ self.heads.W
    return jvp


def _two_norm_weights(q_power: int, v_power: int) -> Callable[[Callable], Callable]:
    """The 2-norm bound with ``|W^Q|₂^q_power |W^V|₂^v_power`` under the square root (the right ones: 4, 2)."""
    def mutate(_: Callable) -> Callable:
        def bound(heads: L2Heads, N: int, *, sharpened: bool = False) -> torch.Tensor:
            two = lambda M: torch.linalg.matrix_norm(M.double(), ord=2)  # noqa: E731
            out = 1.0 if heads.W is None else two(heads.W)
            weights = (two(heads.Q).pow(q_power) * two(heads.V).pow(v_power)).sum().sqrt() * out
            c = 2 * math.sqrt(2) if sharpened else 4.0
            return math.sqrt(N) / heads.tau * (c * l2_bounds.phi_inverse(N - 1) + 1) * weights
        return bound
    return mutate


def _printed_with_square(_: Callable) -> Callable:
    """The "printed" bound with the correct ``|W^Q|₂⁴``: then it is not the paper's and holds."""
    return lambda heads, N: l2_bounds.theorem_3_2_two(heads, N) * (4 * l2_bounds.phi_inverse(N) + 1) / (
        4 * l2_bounds.phi_inverse(N - 1) + 1)


def _inf_bound(constant: float, q_factors: int) -> Callable[[Callable], Callable]:
    """The ∞-norm bound with ``constant`` in place of 4, and one or both of ``|W^Q|_∞ |W^{Qᵀ}|_∞``."""
    def mutate(_: Callable) -> Callable:
        def bound(heads: L2Heads, N: int) -> torch.Tensor:
            inf = lambda M: M.abs().sum(-1).amax(-1)  # noqa: E731
            Q, V = heads.Q.double(), heads.V.double()
            out = 1.0 if heads.W is None else inf(heads.W.double().mT)
            q = inf(Q) * inf(Q.mT) if q_factors == 2 else inf(Q)
            return (constant * l2_bounds.phi_inverse(N - 1) + 1 / heads.tau) * q.max() * inf(V.mT).max() * out
        return bound
    return mutate


def _fixed_point_sign(original: Callable) -> Callable:
    """The inversion iterates ``Z <- Y + c F(Z)`` (sign flipped)."""
    return lambda fn, Y, c, **kw: original(fn, Y, -c, **kw)


def _rate_inverted(original: Callable) -> Callable:
    """The measured rate as ``e_k / e_{k+1}``."""
    return lambda errors, **kw: 1 / original(errors, **kw)


def _contraction_doubled(original: Callable) -> Callable:
    return lambda bound, rho=0.5: 2 * original(bound, rho)


def _bound_without_sqrt_n(original: Callable) -> Callable:
    """The contractive model's bound without its ``sqrt(n)`` factor."""
    return lambda self, n: original(self, n) / math.sqrt(n)


def _forward_single_score(original: Callable) -> Callable:
    """The language model's L2 scores with ``<q_i, q_j>`` counted once instead of twice."""
    def forward(self: charlm.Attention, X: torch.Tensor) -> torch.Tensor:
        if self.kind == "dot":
            return original(self, X)
        n, tau = X.shape[1], math.sqrt(self.k)
        Xh = X.unsqueeze(1)
        q = Xh @ self.Q
        S = (q @ q.mT - q.square().sum(-1).unsqueeze(-2)) / tau
        v = Xh @ (self.Q @ (self.Q.mT @ self.V)) / tau
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        P = torch.softmax(S.masked_fill(~mask, -torch.inf), dim=-1)
        out = (P @ v).transpose(1, 2).reshape(X.shape[0], n, -1) @ self.O
        return out / self.bound(n).clamp_min(1.0) if self.kind == "l2-contractive" else out
    return forward


def _log_in_nats(original: Callable) -> Callable:
    return lambda *args, **kw: original(*args, **kw) * math.log(2)


MUTATIONS: dict[str, tuple[object, str, Callable[[Callable], Callable], list[Callable[[], None]]]] = {
    # name: (owner, attribute, mutation, catchers that must fail)
    "phi_inverse as printed, W0(N/e)": (l2_bounds, "phi_inverse", _phi_printed, [lambert_grid_maximum]),
    "phi_inverse without /e": (l2_bounds, "phi_inverse", _phi_without_e, [lambert_grid_maximum]),
    "closed-form JVP drops -<k_j, dk_j>": (L2Linearization, "jvp", _jvp_without_key_term,
                                          [closed_form_matches_autograd]),
    "2-norm bound with |W^Q|^2 (one power)": (l2_bounds, "theorem_3_2_two", _two_norm_weights(2, 2),
                                               [corrected_two_norm_bound_at_every_scale, bounds_scale_like_the_map]),
    "2-norm bound with |W^V|^1": (l2_bounds, "theorem_3_2_two", _two_norm_weights(4, 1), [bounds_scale_like_the_map]),
    "printed 2-norm bound given the square": (l2_bounds, "theorem_3_2_two_as_printed", _printed_with_square,
                                              [printed_two_norm_bound_is_beaten]),
    "∞-norm bound drops the factor 4": (l2_bounds, "theorem_3_2_inf", _inf_bound(1.0, 2), [infinity_bound_reached]),
    "∞-norm bound with one factor of W^Q": (l2_bounds, "theorem_3_2_inf", _inf_bound(4.0, 1),
                                            [bounds_scale_like_the_map]),
    "inversion with the sign of c flipped": (invertible, "fixed_point_inverse", _fixed_point_sign,
                                             [inversion_rate_is_the_spectral_radius]),
    "geometric_rate inverted": (invertible, "geometric_rate", _rate_inverted, [inversion_rate_is_the_spectral_radius]),
    "contractive bound without sqrt(n)": (charlm.Attention, "bound", _bound_without_sqrt_n, [replay_matches_record]),
    "L2 scores with halved queries": (charlm.Attention, "forward", _forward_single_score, [replay_matches_record]),
    "n-gram baseline in nats": (charlm, "ngram_bits_per_char", _log_in_nats, [unigram_matches_counts]),
}

def _two_norm_without_sqrt_n(original: Callable) -> Callable:
    return lambda heads, N, **kw: original(heads, N, **kw) / math.sqrt(N)


def _inf_bound_printed_lambert(_: Callable) -> Callable:
    """The ∞-norm bound with the paper's printed value W₀(N/e) of the Lambert-W term."""
    def bound(heads: L2Heads, N: int) -> torch.Tensor:
        inf = lambda M: M.abs().sum(-1).amax(-1)  # noqa: E731
        Q, V = heads.Q.double(), heads.V.double()
        out = 1.0 if heads.W is None else inf(heads.W.double().mT)
        return (4 * l2_bounds.phi_inverse(N) + 1 / heads.tau) * (inf(Q) * inf(Q.mT)).max() * inf(V.mT).max() * out
    return bound


# Mutations that no chapter check catches: the checks listed still pass under them (asserted below), so each
# is a statement the book does not test. (owner, attribute, mutation, checks that still pass, why)
SURVIVORS: dict[str, tuple[object, str, Callable[[Callable], Callable], list[Callable[[], None]], str]] = {
    "∞-norm bound with W0(N/e)": (
        l2_bounds, "theorem_3_2_inf", _inf_bound_printed_lambert, [infinity_bound_reached, bounds_scale_like_the_map],
        "a looser bound: optimised inputs still reach 0.6-1 of it (the band's low end is not tight)"),
    "2-norm bound without sqrt(N)": (
        l2_bounds, "theorem_3_2_two", _two_norm_without_sqrt_n,
        [corrected_two_norm_bound_at_every_scale, bounds_scale_like_the_map, inversion_rate_is_the_spectral_radius],
        "optimised inputs reach under half of the sharpened 2-norm bound at N = 4 and 8, so a factor sqrt(N) < 3 "
        "goes unnoticed; only the N-dependence of chapter 32 would show it"),
    "contraction_coefficient doubled": (
        invertible, "contraction_coefficient", _contraction_doubled, [inversion_rate_is_the_spectral_radius],
        "the rate is compared with c·ϱ(D_X F), whatever c is, and optimised inputs reach under half of the "
        "sharpened bound B, so c = 1.8/B still gives c·Lip_X(F) < 0.9"),
}

CATCHERS = sorted({c for *_, catchers in MUTATIONS.values() for c in catchers}, key=lambda c: c.__name__)


test_catchers_pass, test_mutation_is_caught = mutation_tests(CATCHERS, MUTATIONS)


@pytest.mark.parametrize("name", list(SURVIVORS))
def test_survivor_is_not_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The survivors are real: under each, the chapter checks listed still pass (the gap is documented)."""
    owner, attribute, mutation, checks, _ = SURVIVORS[name]
    mutate(monkeypatch, owner, attribute, mutation)
    for passing in checks:
        passing()
