"""Sweeps behind the book's figures: each a function with a progress bar and an on-disk results cache.

The cache lives in ``LIPNB_CACHE_DIR`` (default ``.cache/lipnb`` at the repository root); an entry is
keyed by the sweep's name, its parameters and a hash of lipnb's source code, and is never committed,
so a fresh clone (and CI) recomputes everything it shows.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from tqdm.auto import tqdm

from . import bounds
from .attention import MultiHead, MultiHeadMap, mask_future
from .lipschitz import jacobian_matrix, local_lipschitz, weighted_operator_norm

__all__ = [
    "HeadSpectrum",
    "LineFit",
    "attention_covariances",
    "attention_flow",
    "attention_flow_rk4",
    "attention_layernorm",
    "ball_tokens",
    "bias_perturbation_effect",
    "bootstrap_slope",
    "cache_dir",
    "cached",
    "cluster_labels",
    "conditional_w2",
    "fit_line",
    "flow_gronwall_log",
    "flow_jacobians",
    "flow_radius_bound",
    "head_gamma_table",
    "head_spectra",
    "jacobian_block_norms",
    "large_radius_error",
    "large_radius_sweep",
    "layernorm_activations",
    "lemma_c2_term_matrices",
    "lemma_c_7_constants",
    "lemma_c_7_sharpened",
    "masked_mean_field",
    "masked_mean_field_bound",
    "masked_mean_field_ratio",
    "maximize_local_lipschitz",
    "own_query_norms",
    "per_head_lipschitz",
    "progress",
    "quadratic_growth_slopes",
    "random_head",
    "real_adversarial_sweep",
    "real_lipschitz_sweep",
    "repeat_tokens",
    "repeated_token_lipschitz",
    "score_gaps",
    "selection_jacobian",
    "single_head",
    "student_interval",
    "synchronous_lipschitz",
    "synthetic_bound_sweep",
    "textbook_multihead",
    "theorem_3_5_sharpened",
    "two_dirac_constant",
    "wasserstein2_empirical",
    "weighted_attention_lipschitz",
]

T = TypeVar("T")


def cache_dir() -> Path:
    """The results cache folder: ``LIPNB_CACHE_DIR`` or ``.cache/lipnb`` next to the lipnb package."""
    default = Path(__file__).resolve().parents[1] / ".cache" / "lipnb"
    return Path(os.environ.get("LIPNB_CACHE_DIR", default))


def _code_hash() -> str:
    """A hash of lipnb's source: editing any sweep (or what it calls) invalidates every cached result."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cached(name: str, params: dict, compute: Callable[[], T]) -> T:
    """Return ``compute()``, stored under ``name`` and a hash of ``params``; reuse a stored result."""
    key = json.dumps({"name": name, "params": params, "code": _code_hash()}, sort_keys=True, default=str)
    path = cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    if path.exists():
        return torch.load(path, weights_only=False)
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(result, tmp)
    tmp.replace(path)
    return result


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """A tqdm progress bar that stays quiet when ``LIPNB_PROGRESS=0`` (as in CI logs)."""
    disable = os.environ.get("LIPNB_PROGRESS", "1") == "0"
    return iter(tqdm(items, desc=desc, total=total, disable=disable, leave=False))


# ------------------------------------------------------------ normalization and heads (Sec. 2.3, Lemma 3.8)


def attention_layernorm(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """Sec. 2.3: the LayerNorm whose output enters layer ``layer``'s self-attention.

    BERT (post-LN): the embeddings' LayerNorm for layer 0, else the output LayerNorm of layer ``layer - 1``.
    GPT-2 (pre-LN): the block's ``ln_1``.
    """
    from . import models

    block = models._layer(model, layer)                  # checks the family and the range of ``layer``
    if models._family(model) == "gpt2":
        return block.ln_1
    return model.embeddings.LayerNorm if layer == 0 else models._layer(model, layer - 1).output.LayerNorm


def layernorm_activations(model: torch.nn.Module, layers: Iterable[int],
                          input_ids: torch.Tensor) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """Sec. 2.3: ``{layer: (x, LayerNorm(x))}`` of each :func:`attention_layernorm`, by forward hooks, no grad."""
    layers = list(layers)
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(index: int) -> Callable[..., None]:
        def capture(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
            captured[index] = (args[0].detach().clone(), output.detach().clone())
        return capture

    handles = [attention_layernorm(model, i).register_forward_hook(hook(i)) for i in layers]
    try:
        with torch.no_grad():
            model(input_ids=input_ids.to(next(model.parameters()).device), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return {i: captured[i] for i in layers}


def per_head_lipschitz(heads: MultiHead, X: torch.Tensor, *, project: bool = False, masked: bool = False,
                       **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Lemma 3.8: ``Lip_X(f_h)`` (or ``Lip_X(W_h f_h)`` if ``project``) of every head, ``(H, B)``, and convergence.

    Each head keeps its score and value biases (App. E.3), drops the output bias; ``kwargs`` go to
    :func:`lipnb.local_lipschitz`.
    """
    values, converged = [], []
    for h in range(heads.num_heads):
        one = single_head(heads, h, project=project)
        result = local_lipschitz(MultiHeadMap(one, masked=masked), X, detailed=True, **kwargs)
        values.append(result.value)
        converged.append(result.converged)
    return torch.stack(values), torch.stack(converged)


def bias_perturbation_effect(model: torch.nn.Module, layer: int, X: torch.Tensor, bias: str,
                             scale: float = 1.0, seed: int = 0) -> float:
    """Remark E.1 on the real module: relative change of the self-attention output (``kind="self"``)
    when ``scale * N(0, I)`` is added to its ``"query"``, ``"key"`` or ``"value"`` bias (on a copy)."""
    import copy

    from . import models

    if bias not in ("query", "key", "value"):
        raise ValueError(f"bias must be 'query', 'key' or 'value'; got {bias!r}")
    twin = copy.deepcopy(model)
    f = models.attention_map(twin, layer, "self")
    before = f(X)
    block = models._layer(twin, layer)
    if models._family(twin) == "bert":
        param = getattr(block.attention.self, bias).bias
    else:
        param = block.attn.c_attn.bias.split(block.attn.split_size)[("query", "key", "value").index(bias)]
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        param.add_(scale * noise.to(param))
    after = f(X)
    return ((after - before).norm() / before.norm()).item()


def single_head(heads: MultiHead, h: int, *, project: bool = False) -> MultiHead:
    """Def 2.2: head ``h`` alone with its score and value biases: ``f_h`` (``W = I``) or ``W_h f_h`` if ``project``."""
    k = heads.V.shape[1]
    W = heads.W[h:h + 1] if project else torch.eye(k, dtype=heads.V.dtype, device=heads.V.device)[None]
    return MultiHead(heads.A[h:h + 1], heads.V[h:h + 1], W,
                     None if heads.score_bias is None else heads.score_bias[h:h + 1],
                     None if heads.value_bias is None else heads.value_bias[h:h + 1])


def textbook_multihead(X: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, W: torch.Tensor,
                       b_Q: torch.Tensor, b_K: torch.Tensor, b_V: torch.Tensor) -> torch.Tensor:
    """App. E.3, Eq. (5) as written: ``sum_h W_h sum_j softmax_j(<Q_h x_i + b_Q, K_h x_j + b_K>/√k) (V_h x_j + b_V)``.

    ``Q, K, V`` ``(H, k, d)``, ``W`` ``(H, d_out, k)``, biases ``(H, k)``; the key bias is kept (Remark E.1).
    """
    q = torch.einsum("bnd,hkd->bhnk", X, Q) + b_Q[:, None, :]
    key = torch.einsum("bnd,hkd->bhnk", X, K) + b_K[:, None, :]
    value = torch.einsum("bnd,hkd->bhnk", X, V) + b_V[:, None, :]
    P = torch.softmax(q @ key.mT / math.sqrt(Q.shape[1]), dim=-1)
    return torch.einsum("bhnk,hek->bne", P @ value, W)


# ------------------------------------------------ statistics of the sweeps (growth rates and exponents)


@dataclass(frozen=True)
class LineFit:
    """A least-squares line ``y = slope x + intercept`` with a confidence interval ``[low, high]`` on the slope."""

    slope: float
    intercept: float
    low: float
    high: float


def fit_line(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95) -> LineFit:
    """Rates of Theorem 3.7, App. C.7, Prop. 3.6: least-squares slope with its Student-t interval at ``level``."""
    from scipy import stats

    x = torch.as_tensor(x, dtype=torch.float64).flatten().numpy()
    y = torch.as_tensor(y, dtype=torch.float64).flatten().numpy()
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 2)) * fit.stderr
    return LineFit(float(fit.slope), float(fit.intercept), float(fit.slope - half), float(fit.slope + half))


def student_interval(values: torch.Tensor, *, level: float = 0.95) -> tuple[float, float, float]:
    """App. C.7: mean of independent replicates and its Student-t interval ``(mean, low, high)`` at ``level``."""
    from scipy import stats

    v = torch.as_tensor(values, dtype=torch.float64).flatten().numpy()
    low, high = stats.t.interval(level, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    return float(v.mean()), float(low), float(high)


def bootstrap_slope(x: torch.Tensor, y: torch.Tensor, *, level: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
    """Growth exponents (Sec. 5): least-squares slope of ``y`` on ``x`` and its percentile bootstrap interval.

    Points are resampled within each distinct ``x`` (each sequence length keeps its number of sequences),
    so the interval reflects the spread between sequences. Returns ``(slope, low, high)``.
    """
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    y = torch.as_tensor(y, dtype=torch.float64).flatten()
    g = torch.Generator().manual_seed(seed)
    groups = [torch.nonzero(x == v).flatten() for v in torch.unique(x)]
    picks = torch.cat([idx[torch.randint(len(idx), (resamples, len(idx)), generator=g)] for idx in groups], 1)
    xs, ys = x[picks], y[picks]
    xc = xs - xs.mean(1, keepdim=True)
    slopes = (xc * (ys - ys.mean(1, keepdim=True))).sum(1) / xc.square().sum(1)
    xc0 = x - x.mean()
    slope = float((xc0 * (y - y.mean())).sum() / xc0.square().sum())
    low, high = torch.quantile(slopes, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return slope, float(low), float(high)


# ------------------------------------------------ large radius and mean field (Theorem 3.7, App. C.3-C.7)


def _masked_scores(X: torch.Tensor, A: torch.Tensor, masked: bool) -> torch.Tensor:
    scores = (X @ A.mT) @ X.mT
    return mask_future(scores) if masked else scores


def score_gaps(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): per row, largest minus second-largest score ``<A x_i, x_j>``, ``(B, n)``.

    A row with a single admissible token (row 1 when masked) has gap ``inf``; at ``RX`` the gaps scale by ``R²``.
    """
    scores = _masked_scores(X, A, masked)
    if X.shape[1] < 2:
        return torch.full(X.shape[:2], math.inf, dtype=scores.dtype, device=X.device)
    top = scores.topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def selection_jacobian(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Theorem 3.7 (4.5 masked): the matrix ``(B, n d_v, n d)`` of the limit ``ε ↦ (V ε_{m_1}, ..., V ε_{m_n})``.

    ``m_i = argmax_j <A x_i, x_j>`` (over ``j <= i`` when masked); off the null set of ties it is unique.
    """
    m = _masked_scores(X, A, masked).argmax(-1)
    B, n, d = X.shape
    one_hot = torch.nn.functional.one_hot(m, n).to(V.dtype)
    return torch.einsum("bij,ek->biejk", one_hot, V).reshape(B, n * V.shape[0], n * d)


def large_radius_sweep(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Theorem 3.7: ``(||D_{RX} f - S||_2, ||D_{RX} f||_2)`` for each radius ``R``, one sequence ``X`` ``(1, n, d)``.

    Dense float64 Jacobians; ``S`` is :func:`selection_jacobian` at ``X`` (the argmax does not depend on ``R > 0``).
    """
    from .attention import self_attention

    X, A, V = X.double(), A.double(), V.double()
    R = torch.as_tensor(radii, dtype=torch.float64).reshape(-1, 1, 1)
    J = jacobian_matrix(lambda Z: self_attention(Z, A, V, masked=masked), R * X)
    S = selection_jacobian(X, A, V, masked=masked)
    return torch.linalg.matrix_norm(J - S, ord=2), torch.linalg.matrix_norm(J, ord=2)


def large_radius_error(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor, radii: torch.Tensor, *,
                       masked: bool = False) -> torch.Tensor:
    """Theorem 3.7: ``||D_{RX} f - S||_2`` for each radius ``R`` (see :func:`large_radius_sweep`), ``(len(radii),)``."""
    return large_radius_sweep(X, A, V, radii, masked=masked)[0]


def quadratic_growth_slopes(n: int, d: int, radii: torch.Tensor, replicates: int, *,
                            seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """App. C.7 / Kim et al. (2021): ``Lip_X(f)`` at :func:`~lipnb.adversarial.quadratic_growth_input`, ``(reps, R)``.

    Each replicate draws its own ``A``, ``V`` (i.i.d. Gaussian, variance ``1/d``) and its own tokens; returns
    the dense float64 constants at every radius and each replicate's log-log slope.
    """
    from .adversarial import quadratic_growth_input
    from .attention import self_attention

    g = torch.Generator().manual_seed(seed)
    radii = torch.as_tensor(radii, dtype=torch.float64)
    constants = []
    for r in range(replicates):
        A = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        V = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        X = quadratic_growth_input(radii, n, d, seed=seed * 100_003 + r)
        J = jacobian_matrix(lambda Z, A=A, V=V: self_attention(Z, A, V), X)
        constants.append(torch.linalg.matrix_norm(J, ord=2))
    constants = torch.stack(constants)
    slopes = torch.tensor([fit_line(radii.log(), c.log()).slope for c in constants], dtype=torch.float64)
    return constants, slopes


def repeat_tokens(Y: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Def C.4: the sequence ``(B, sum m, d)`` holding token ``y_k`` of ``Y`` ``(B, K, d)`` repeated ``m_k`` times."""
    counts = torch.as_tensor(counts, dtype=torch.long, device=Y.device)
    if counts.shape != Y.shape[1:2] or bool((counts < 1).any()):
        raise ValueError(f"counts must be K = {Y.shape[1]} positive integers; got {counts.tolist()}")
    return Y.repeat_interleave(counts, dim=1)


def attention_covariances(Y: torch.Tensor, A: torch.Tensor, *, weights: torch.Tensor | None = None,
                          queries: torch.Tensor | None = None) -> torch.Tensor:
    """Lemma C.2 / C.6: covariance ``(B, m, d, d)`` of ``μ = Σ w_j δ_{y_j}`` under the kernel ``∝ w_j e^{<A z, y_j>}``.

    One covariance per query ``z`` (default: the tokens themselves, giving ``Cov_i`` of Lemma C.2).
    """
    Z = Y if queries is None else queries
    scores = (Z @ A.mT) @ Y.mT
    if weights is not None:
        w = torch.as_tensor(weights, dtype=Y.dtype, device=Y.device).expand(Y.shape[:2])
        scores = scores + torch.log(w / w.sum(-1, keepdim=True)).unsqueeze(1)
    P = torch.softmax(scores, dim=-1)
    centred = Y.unsqueeze(1) - (P @ Y).unsqueeze(2)
    return torch.einsum("bkj,bkjd,bkje->bkde", P, centred, centred)


def own_query_norms(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *, weights: torch.Tensor | None = None,
                    queries: torch.Tensor | None = None) -> torch.Tensor:
    """Lemma C.6, middle term: ``||D_z Γ_μ||_2 = ||V Cov_μ(z) A||_2`` for each query ``z``, shape ``(B, m)``.

    This is how fast the output of a particle at ``z`` moves when only that particle moves.
    """
    cov = attention_covariances(Y, A, weights=weights, queries=queries)
    return torch.linalg.matrix_norm(V @ cov @ A, ord=2)


def weighted_attention_lipschitz(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor,
                                 weights: torch.Tensor) -> torch.Tensor:
    """Lemma C.5: ``||W^{1/2} D_Y f_w W^{-1/2}||_2`` with each sequence's own weights ``(B, K)``, float64, ``(B,)``.

    :func:`lipnb.weighted_operator_norm` with Def C.4's map at weights ``(K,)`` or ``(B, K)``.
    """
    from .attention import self_attention

    Y, A, V = Y.double(), A.double(), V.double()
    w = torch.as_tensor(weights, dtype=torch.float64).expand(Y.shape[:2])
    return weighted_operator_norm(lambda Z: self_attention(Z, A, V, weights=w), Y, w)


def synchronous_lipschitz(fn: Callable[[torch.Tensor], torch.Tensor], Y: torch.Tensor,
                          counts: torch.Tensor) -> torch.Tensor:
    """Lemma C.5 (our reading): ``||D_X f||`` on perturbations moving all copies of each token together, ``(B,)``.

    ``X`` repeats ``y_k`` ``m_k`` times; the perturbations ``(η_1 x m_1, ..., η_K x m_K)`` form a subspace
    with orthonormal basis ``R diag(m)^{-1/2}``, ``R`` the replication matrix.
    """
    counts = torch.as_tensor(counts, dtype=torch.long)
    X = repeat_tokens(Y, counts).double()
    d = Y.shape[-1]
    J = jacobian_matrix(fn, X)
    K = len(counts)
    R = torch.eye(K, dtype=torch.float64).repeat_interleave(counts, dim=0) / counts.double().sqrt().unsqueeze(0)
    basis = torch.kron(R, torch.eye(d, dtype=torch.float64))
    return torch.linalg.matrix_norm(J @ basis, ord=2)


def repeated_token_lipschitz(Y: torch.Tensor, A: torch.Tensor, V: torch.Tensor,
                             counts: torch.Tensor) -> torch.Tensor:
    """Our correction of Lemma C.5: ``Lip_X(f) = max(||D_Y f_w||_w, max_{m_k >= 2} ||V Cov_k A||_2)``, ``(B,)``.

    ``X`` repeats ``y_k`` ``m_k`` times, ``w = m / n``: copies moving together see the weighted norm,
    copies moving apart only their own query term.
    """
    counts = torch.as_tensor(counts, dtype=torch.long)
    w = counts.double() / counts.sum()
    Y = Y.double()
    rigid = weighted_attention_lipschitz(Y, A, V, w)
    own = own_query_norms(Y, A.double(), V.double(), weights=w)
    split = own[:, counts >= 2].amax(1) if bool((counts >= 2).any()) else torch.zeros_like(rigid)
    return torch.maximum(rigid, split)


def wasserstein2_empirical(X: torch.Tensor, Y: torch.Tensor) -> float:
    """Sec. 3.1: ``W_2`` between the empirical measures of two sequences of the same length (exact assignment)."""
    from scipy.optimize import linear_sum_assignment

    X = X.double().reshape(-1, X.shape[-1])
    Y = Y.double().reshape(-1, Y.shape[-1])
    if X.shape != Y.shape:
        raise ValueError(f"need two sequences of the same shape; got {tuple(X.shape)} and {tuple(Y.shape)}")
    cost = (X.unsqueeze(1) - Y.unsqueeze(0)).square().sum(-1)
    rows, cols = linear_sum_assignment(cost.numpy())
    return math.sqrt(float(cost[rows, cols].mean()))


def two_dirac_constant(gamma: float | torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Proposition 3.6 (our derivation): the two-Dirac constant is ``(1 + γR²) e^{γR²} / 2``, up to ``O(e^{-2γR²})``."""
    g, R = torch.as_tensor(gamma, dtype=torch.float64), torch.as_tensor(R, dtype=torch.float64)
    return (1 + g * R**2) * torch.exp(g * R**2) / 2


def theorem_3_5_sharpened(A: torch.Tensor, V: torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Theorem 3.5 with half its exponent (our proof): ``||V|| ((1 + 2||A||R²) e^{||A||R²} + ||A||R²)``, all ``n``."""
    a = torch.linalg.matrix_norm(A.double(), ord=2)
    v = torch.linalg.matrix_norm(V.double(), ord=2)
    R2 = torch.as_tensor(R, dtype=torch.float64) ** 2
    return v * ((1 + 2 * a * R2) * torch.exp(a * R2) + a * R2)


# ------------------------------------------- the √n bound and its tightness (Theorem 3.3, C.3, Prop. 3.4, Lemma C.7)


def ball_tokens(batch: int, n: int, d: int, R: float, *, seed: int = 0) -> torch.Tensor:
    """Theorem 3.3's domain ``B_R^n``: ``(batch, n, d)`` tokens drawn uniformly in the ball of radius ``R``, float64."""
    g = torch.Generator().manual_seed(seed)
    directions = torch.nn.functional.normalize(torch.randn(batch, n, d, generator=g, dtype=torch.float64), dim=-1)
    radii = R * torch.rand(batch, n, 1, generator=g, dtype=torch.float64) ** (1.0 / d)
    return radii * directions


def lemma_c2_term_matrices(X: torch.Tensor, A: torch.Tensor, *, masked: bool = False) -> torch.Tensor:
    """Lemma C.2 (``V = I``): the three terms of ``D_X f`` as dense matrices ``(B, 3, n d, n d)``, float64.

    Blocks ``(i, j)``: ``P_ij I``; ``δ_ij Cov_i A``; ``P_ij (x_j - x̄_i)(A x_i)ᵀ``. Their sum is the Jacobian.
    """
    from .attention import attention_matrix

    X, A = X.double(), A.double()
    B, n, d = X.shape
    P = attention_matrix(X, A, masked=masked)
    xbar = P @ X
    centred = X.unsqueeze(1) - xbar.unsqueeze(2)                       # (B, i, j, d): x_j - x̄_i
    cov = torch.einsum("bij,bijd,bije->bide", P, centred, centred)
    eye = torch.eye(d, dtype=torch.float64)
    mean = torch.einsum("bij,de->bidje", P, eye)
    own = torch.einsum("bide,ij->bidje", cov @ A, torch.eye(n, dtype=torch.float64))
    spread = torch.einsum("bij,bijd,bie->bidje", P, centred, X @ A.mT)
    return torch.stack([mean, own, spread], 1).reshape(B, 3, n * d, n * d)


@dataclass(frozen=True)
class HeadSpectrum:
    """Prop. 3.4 for each head: largest and smallest real eigenvalue of ``A_h``, ``γ_h`` and the Sec. 5.2 case."""

    largest: torch.Tensor
    smallest: torch.Tensor
    gamma: torch.Tensor
    positive: torch.Tensor


def head_spectra(A: torch.Tensor, *, rtol: float = 1e-9) -> HeadSpectrum:
    """Prop. 3.4 / Sec. 5.2 for a stack ``(H, d, d)``: ``γ_h = max(γ_1/8, -γ_d)`` via a low-rank factorization.

    ``A = B C`` from the SVD truncated at rank ``r``; the non-zero eigenvalues of ``A`` are those of the
    ``r x r`` matrix ``C B``, and ``0`` is one more when ``r < d``. ``positive`` is ``γ_1 > -8 γ_d``.
    """
    A = A.double()
    largest, smallest = [], []
    for M in A:
        U, S, Vh = torch.linalg.svd(M)
        r = int((S > S[0] * M.shape[0] * torch.finfo(torch.float64).eps).sum())
        values = torch.linalg.eigvals((Vh[:r] @ U[:, :r]) * S[:r])
        scale = values.abs().max().clamp_min(1e-300)
        real = values.real[values.imag.abs() <= rtol * scale]
        if r < M.shape[0]:
            real = torch.cat([real, real.new_zeros(1)])
        if real.numel() == 0:
            raise ValueError("a head has no real eigenvalue, so Lemma C.7 / Proposition 3.4 do not apply")
        largest.append(real.max())
        smallest.append(real.min())
    top, bottom = torch.stack(largest), torch.stack(smallest)
    return HeadSpectrum(top, bottom, torch.maximum(top / 8, -bottom), top > -8 * bottom)


def lemma_c_7_sharpened(eigenvalue: float | torch.Tensor, R: float | torch.Tensor,
                        n: int | torch.Tensor) -> torch.Tensor:
    """Lemma C.7 with the spread term kept (our proof): ``Lip_X(f) >= √(n-1) p (1 + 2γR² (1 - p))``, ``V = I``.

    ``p`` is the lemma's weight and ``2γR² = λR²/4`` (``λ > 0``) or ``2|λ|R²`` (``λ < 0``).
    """
    lam = torch.as_tensor(eigenvalue, dtype=torch.float64)
    R, n = torch.as_tensor(R, dtype=torch.float64), torch.as_tensor(n, dtype=torch.float64)
    kappa = torch.where(lam > 0, lam / 4, 2 * lam.abs()) * R**2
    p = 1 / (1 + (n - 1) * torch.exp(-kappa))
    return torch.sqrt(n - 1) * p * (1 + kappa * (1 - p))


def lemma_c_7_constants(A: torch.Tensor, R: float, ns: Iterable[int], *, case: str = "auto") -> torch.Tensor:
    """Lemma C.7: the exact ``Lip_X(f)`` (``V = I``) at the lemma's input for each ``n``, through two Diracs.

    The input is two distinct tokens repeated ``1`` and ``n - 1`` times, so :func:`repeated_token_lipschitz`
    gives the exact constant at a cost independent of ``n``; returns ``(len(ns),)``, float64.
    """
    from .adversarial import lemma_c_7_input

    A = A.double()
    Y = lemma_c_7_input(A, R, 2, case=case)
    eye = torch.eye(A.shape[0], dtype=torch.float64)
    return torch.cat([repeated_token_lipschitz(Y, A, eye, torch.tensor([1, n - 1])) for n in ns])


def real_lipschitz_sweep(model_name: str, layer: int, lengths: Iterable[int], per_length: int) -> dict:
    """Sec. 5.1 on one layer: ``Lip_X`` of the ``"mha"`` map at Alice sequences, with the bounds of Theorem 3.3.

    The model runs in float32 and Lanczos stops at relative residual ``1e-4``, as in the paper (App. E.1);
    the bounds are computed in float64. Returns float64 tensors, one entry per sequence: ``n``, ``lip``,
    ``radius`` (largest token norm, so ``X`` lies in ``B_R^n``), ``mean_radius``, ``bound`` (Lemma 3.8 +
    Theorem E.3 at ``radius``), ``data_bound`` (Lemma 3.8 + Theorem C.3 at ``X``) and ``column_sum``, the
    largest ``Σ_i P_ij`` over tokens ``j`` and heads (where Theorem 3.3's ``√n`` comes from). Cached.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "layer": layer, "lengths": lengths, "per_length": per_length}

    def compute() -> dict:
        from . import data, models
        from .attention import attention_matrix

        model, tokenizer = models.load(model_name)
        sequences = data.token_sequences(data.alice_text(), tokenizer, lengths, per_length)
        f = models.attention_map(model, layer, "mha")
        heads = models.head_matrices(model, layer)
        masked = models.is_decoder(model)
        keys = ("n", "lip", "radius", "mean_radius", "bound", "data_bound", "column_sum")
        rows: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
        for n in progress(lengths, desc=f"{model_name} layer {layer}"):
            X = models.attention_inputs(model, layer, sequences[n])
            rows["lip"].append(local_lipschitz(f, X, tol=1e-4).double())
            X = X.double()
            norms = X.norm(dim=-1)
            rows["n"].append(torch.full((len(X),), float(n), dtype=torch.float64))
            rows["radius"].append(norms.amax(1))
            rows["mean_radius"].append(norms.mean(1))
            rows["bound"].append(bounds.multihead_bound(heads, norms.amax(1), n))
            rows["data_bound"].append(bounds.multihead_data_bound(X, heads, masked=masked))
            P = attention_matrix(X, heads.A.double(), score_bias=heads.score_bias.double(), masked=masked)
            rows["column_sum"].append(P.sum(-2).flatten(1).amax(1))
        return {k: torch.cat(v) for k, v in rows.items()}

    return cached("real_lipschitz_sweep", params, compute)


def real_adversarial_sweep(model_name: str, layer: int, head: int, R: float, lengths: Iterable[int]) -> dict:
    """Sec. 5.2 on one layer: ``Lip_X`` of the ``"mha"`` map at Lemma C.7's input built on head ``head``.

    The input uses ``A_head`` and the case rule of Sec. 5.2, radius ``R``; float32 and Lanczos tolerance ``1e-4``
    as in :func:`real_lipschitz_sweep`. Returns ``n`` and ``lip``. Cached.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "layer": layer, "head": head, "R": round(float(R), 6), "lengths": lengths}

    def compute() -> dict:
        from . import models
        from .adversarial import lemma_c_7_input

        model, _ = models.load(model_name)
        f = models.attention_map(model, layer, "mha")
        A = models.head_matrices(model, layer).A[head].double()
        X = lemma_c_7_input(A, float(R), max(lengths)).float()
        lip = [local_lipschitz(f, X[:, :n], tol=1e-4).double() for n in progress(lengths, desc="adversarial")]
        return {"n": torch.tensor(lengths, dtype=torch.float64), "lip": torch.cat(lip)}

    return cached("real_adversarial_sweep", params, compute)


def head_gamma_table(model_name: str, lengths: Iterable[int], per_length: int) -> dict:
    """App. C.5: ``γ_h`` (Prop. 3.4) of every head of every layer, and each layer's mean token radius on Alice.

    Returns ``gamma`` and ``positive`` ``(L, H)`` and ``radius`` ``(L,)``, the mean norm of the tokens entering
    the layer's attention over all sequences of ``lengths``. Cached.
    """
    lengths = [int(n) for n in lengths]
    params = {"model": model_name, "lengths": lengths, "per_length": per_length}

    def compute() -> dict:
        from . import data, models

        model, tokenizer = models.load(model_name)
        sequences = data.token_sequences(data.alice_text(), tokenizer, lengths, per_length)
        layers = list(range(models.num_layers(model)))
        norms: dict[int, list[torch.Tensor]] = {i: [] for i in layers}
        for n in lengths:
            inputs = models.attention_inputs(model, layers, sequences[n])
            for i in layers:
                norms[i].append(inputs[i].double().norm(dim=-1).flatten())
        spectra = [head_spectra(models.head_matrices(model, i).A) for i in progress(layers, desc="heads")]
        return {"gamma": torch.stack([s.gamma for s in spectra]),
                "positive": torch.stack([s.positive for s in spectra]),
                "radius": torch.stack([torch.cat(norms[i]).mean() for i in layers])}

    return cached("head_gamma_table", params, compute)


def random_head(d: int, seed: int) -> torch.Tensor:
    """A test head for Theorem 3.3 / Prop. 3.4: ``A`` with i.i.d. ``N(0, 1/d)`` entries, float64, ``(d, d)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)


def synthetic_bound_sweep(d: int, seed: int, R: float, lengths: Iterable[int], per_length: int) -> dict:
    """Theorem 3.3 vs measurement for ``A = random_head(d, seed)``, ``V = I`` on ``B_R^n``, for each ``n``.

    Two input families: ``"random"`` (``per_length`` sequences uniform in the ball) and ``"adversarial"``
    (Lemma C.7's input, Sec. 5.2's case rule). Each maps to float64 ``n``, ``lip`` (Lanczos), ``bound``
    (Theorem 3.3), ``data_bound`` (Theorem C.3) and ``column_sum`` (largest ``Σ_i P_ij``). Cached.
    """
    from .adversarial import lemma_c_7_input
    from .attention import attention_matrix, self_attention
    from .bounds import theorem_3_3, theorem_c_3

    lengths = [int(n) for n in lengths]
    params = {"d": d, "seed": seed, "R": round(float(R), 9), "lengths": lengths, "per_length": per_length}

    def compute() -> dict:
        A = random_head(d, seed)
        V = torch.eye(d, dtype=torch.float64)
        f = lambda Z: self_attention(Z, A, V)  # noqa: E731
        out: dict[str, dict[str, list[torch.Tensor]]] = {
            k: {"n": [], "lip": [], "bound": [], "data_bound": [], "column_sum": []} for k in ("random", "adversarial")}
        for n in progress(lengths, desc="synthetic"):
            inputs = {"random": ball_tokens(per_length, n, d, R, seed=seed + n),
                      "adversarial": lemma_c_7_input(A, R, n)}
            for name, X in inputs.items():
                rows = out[name]
                rows["n"].append(torch.full((len(X),), float(n), dtype=torch.float64))
                rows["lip"].append(local_lipschitz(f, X, max_iter=500))
                rows["bound"].append(theorem_3_3(A, V, R, n).expand(len(X)))
                rows["data_bound"].append(theorem_c_3(X, A, V))
                rows["column_sum"].append(attention_matrix(X, A).sum(1).amax(1))
        return {name: {k: torch.cat(v) for k, v in rows.items()} for name, rows in out.items()}

    return cached("synthetic_bound_sweep", params, compute)


def maximize_local_lipschitz(fn: Callable[[torch.Tensor], torch.Tensor], X0: torch.Tensor, R: float, *,
                             steps: int = 100, lr: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Lemma 3.1 on ``B_R^n``: projected gradient ascent (Adam) of the exact float64 ``Lip_X(fn)`` from each start.

    For small ``n d`` only (dense Jacobians). Returns the best inputs ``(B, n, d)``, every token of norm
    ``<= R``, and their local constants ``(B,)``: lower bounds on ``Lip(fn|B_R^n)``.
    """
    X = X0.detach().double().clone()
    X = (X * (R / X.norm(dim=-1, keepdim=True)).clamp(max=1)).requires_grad_(True)
    optimizer = torch.optim.Adam([X], lr=lr)

    def value(Z: torch.Tensor) -> torch.Tensor:
        norms = []
        for z in Z:
            J = torch.autograd.functional.jacobian(lambda u: fn(u[None])[0], z, create_graph=True, vectorize=True)
            norms.append(torch.linalg.matrix_norm(J.reshape(-1, z.numel()), ord=2))
        return torch.stack(norms)

    best, best_X = torch.full((len(X),), -torch.inf, dtype=torch.float64), X.detach().clone()
    for _ in range(steps + 1):
        v = value(X)
        better = v.detach() > best
        best = torch.where(better, v.detach(), best)
        best_X[better] = X.detach()[better]
        optimizer.zero_grad()
        (-v.sum()).backward()
        optimizer.step()
        with torch.no_grad():
            X.mul_((R / X.norm(dim=-1, keepdim=True)).clamp(max=1))
    return best_X, best


# ------------------------------------------------ masked attention (Def 2.6, Def 4.1, Theorem 4.4; chapter 7)


def masked_mean_field(X: torch.Tensor, positions: torch.Tensor, A: torch.Tensor, V: torch.Tensor, *,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """Def 2.6: the atoms ``Γ(s_k, x_k)`` of ``F^m(μ)`` for ``μ = Σ_k w_k δ_(s_k, x_k)``, shape ``(B, N, d_v)``.

    Atom ``k`` attends to every atom ``j`` with ``s_j <= s_k`` (same position included), with
    weights ``w_j e^{<A x_k, x_j>}``; positions are unchanged, so they are not returned. ``X`` is
    ``(B, N, d)``, ``positions`` ``(N,)`` or ``(B, N)``, ``weights`` (default uniform) likewise.
    One atom per position gives masked self-attention (Def 2.5); one position gives Def 2.1.
    """
    scores = (X @ A.mT) @ X.mT
    if weights is not None:
        w = torch.as_tensor(weights, dtype=X.dtype, device=X.device).expand(X.shape[:2])
        scores = scores + torch.log(w / w.sum(-1, keepdim=True)).unsqueeze(-2)
    s = torch.as_tensor(positions, device=X.device).expand(X.shape[:2])
    future = s.unsqueeze(-2) > s.unsqueeze(-1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ (X @ V.mT)


def conditional_w2(X: torch.Tensor, Y: torch.Tensor, positions: torch.Tensor,
                   positions_y: torch.Tensor | None = None) -> float:
    """Def 4.1: the conditional ``W_2`` between ``(1/N) Σ δ_(s_k, x_k)`` and ``(1/N) Σ δ_(t_k, y_k)``, exactly.

    Plans must keep the position fixed: the squared distance is ``(1/N) Σ_s`` (optimal assignment cost
    between the atoms at position ``s``), one ``linear_sum_assignment`` per position. ``inf`` when the
    position marginals differ. ``X``, ``Y`` are ``(N, d)``; ``positions`` ``(N,)`` (``positions_y``
    defaults to it).
    """
    from scipy.optimize import linear_sum_assignment

    x = X.detach().double().cpu().numpy()
    y = Y.detach().double().cpu().numpy()
    s = torch.as_tensor(positions).cpu().numpy()
    t = s if positions_y is None else torch.as_tensor(positions_y).cpu().numpy()
    if x.shape[0] != y.shape[0] or sorted(s.tolist()) != sorted(t.tolist()):
        return float("inf")
    total = 0.0
    for p in set(s.tolist()):
        a, b = x[s == p], y[t == p]
        cost = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        rows, cols = linear_sum_assignment(cost)
        total += float(cost[rows, cols].sum())
    return (total / x.shape[0]) ** 0.5


def masked_mean_field_ratio(X: torch.Tensor, Y: torch.Tensor, positions: torch.Tensor, A: torch.Tensor,
                            V: torch.Tensor) -> torch.Tensor:
    """Theorem 4.4's ratio ``W_c(F^m(μ), F^m(ν)) / W_c(μ, ν)`` for uniform measures on the atoms of ``X``, ``Y``.

    ``X``, ``Y`` are ``(B, N, d)`` with the same ``positions`` ``(N,)``; :func:`conditional_w2` on both
    sides, :func:`masked_mean_field` in between; shape ``(B,)``, float64.
    """
    FX, FY = masked_mean_field(X, positions, A, V), masked_mean_field(Y, positions, A, V)
    return torch.tensor([conditional_w2(fx, fy, positions) / conditional_w2(x, y, positions)
                         for x, y, fx, fy in zip(X, Y, FX, FY, strict=True)], dtype=torch.float64)


def jacobian_block_norms(fn: Callable[[torch.Tensor], torch.Tensor], X: torch.Tensor, *, probes: int | None = None,
                         chunk: int = 256, seed: int = 0) -> torch.Tensor:
    """Lemma D.1's block structure: Frobenius norms ``||∂fn(X)_i / ∂x_j||_F`` of the Jacobian at ``X`` ``(1, n, d)``.

    Returns ``(n', n)`` from batched vector-Jacobian products, ``chunk`` at a time: exact with all ``n' d'``
    basis cotangents (``probes=None``), else the Hutchinson estimate from ``probes`` Gaussian cotangents per
    output token (``E ||J_ijᵀ g||² = ||J_ij||_F²``). A zero block gives exactly zero either way.
    """
    Y, pullback = torch.func.vjp(fn, X.detach())
    n_out, d_out = Y.shape[1:]
    if probes is None:
        k, cot = d_out, torch.eye(n_out * d_out, dtype=Y.dtype, device=Y.device)
    else:
        g = torch.Generator(device="cpu").manual_seed(seed)
        k = probes
        noise = torch.randn(n_out, probes, d_out, generator=g, dtype=torch.float64).to(Y)
        cot = torch.einsum("ij,ipe->ipje", torch.eye(n_out, dtype=Y.dtype, device=Y.device), noise)
    cot = cot.reshape(-1, 1, n_out, d_out)
    rows = torch.cat([torch.func.vmap(lambda v: pullback(v)[0])(cot[i:i + chunk])
                      for i in range(0, len(cot), chunk)])                      # (n' k, 1, n, d)
    sq = rows.view(n_out, k, X.shape[1], X.shape[2]).square().sum(-1)
    return (sq.sum(1) if probes is None else sq.mean(1)).sqrt()


def masked_mean_field_bound(A: torch.Tensor, V: torch.Tensor, R: float | torch.Tensor) -> torch.Tensor:
    """Theorem 4.4 as re-derived in chapter 7: ``||V|| (a R² + 2 (1 + 2 a R²) e^{2 a R²})``, ``a = ||A||₂``.

    The factor 2 on the key term is Hardy's inequality for the causal averages; without it (the
    bound of Theorem 3.5) the statement fails for small ``a R²``.
    """
    a = torch.linalg.matrix_norm(A.double(), ord=2)
    v = torch.linalg.matrix_norm(V.double(), ord=2)
    aR2 = a * torch.as_tensor(R, dtype=torch.float64) ** 2
    return v * (aR2 + 2 * (1 + 2 * aR2) * torch.exp(2 * aR2))


# ------------------------------------------------ attention as a flow (residual stack as Euler scheme; chapter 9)


def _velocity(X: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """``Γ_μ(x_i) = Σ_j P_ij V x_j`` for the empirical measure of ``X``: self-attention (Def 2.1), unchecked."""
    return torch.softmax((X @ A.mT) @ X.mT, dim=-1) @ (X @ V.mT)


def attention_flow(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, L: int) -> torch.Tensor:
    """Slides IV: ``L`` residual layers ``X <- X + (T/L) f(X)``, the Euler scheme of ``dx_i/dt = Γ_μ(t)(x_i)``.

    ``X0`` is ``(B, n, d)``; returns the whole trajectory, shape ``(L + 1, B, n, d)``, layer ``k`` at
    time ``k T / L``. With ``T = 1`` this is the slides' stack ``X + (1/L) f(X)``.
    """
    h = T / L
    states = [X0]
    for _ in range(L):
        states.append(states[-1] + h * _velocity(states[-1], A, V))
    return torch.stack(states)


def attention_flow_rk4(X0: torch.Tensor, A: torch.Tensor, V: torch.Tensor, T: float, steps: int) -> torch.Tensor:
    """Reference solution of ``dx_i/dt = Γ_μ(t)(x_i)`` at time ``T``: classical Runge–Kutta, ``steps`` steps."""
    h = T / steps
    X = X0
    for _ in range(steps):
        k1 = _velocity(X, A, V)
        k2 = _velocity(X + h / 2 * k1, A, V)
        k3 = _velocity(X + h / 2 * k2, A, V)
        k4 = _velocity(X + h * k3, A, V)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


def flow_jacobians(states: torch.Tensor, A: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """Lemma C.2 in closed form: dense ``D_X f`` of self-attention at each state ``(B, n, d)``, ``(B, n d_v, n d)``.

    Block ``(i, j)`` is ``V [P_ij I + δ_ij Cov_i A + P_ij (x_j - x̄_i)(A x_i)ᵀ]``; batched, no autodiff.
    """
    B, n, d = states.shape
    P = torch.softmax((states @ A.mT) @ states.mT, dim=-1)
    centred = states.unsqueeze(1) - (P @ states).unsqueeze(2)                  # (B, i, j, d): x_j - x̄_i
    cov = torch.einsum("bij,bijd,bije->bide", P, centred, centred)
    eye_d = torch.eye(d, dtype=states.dtype, device=states.device)
    eye_n = torch.eye(n, dtype=states.dtype, device=states.device)
    J = torch.einsum("bij,de->bidje", P, eye_d) + torch.einsum("bide,ij->bidje", cov @ A, eye_n) \
        + torch.einsum("bij,bijd,bie->bidje", P, centred, states @ A.mT)
    return torch.einsum("vd,bidje->bivje", V, J).reshape(B, n * V.shape[0], n * d)


def flow_radius_bound(r0: float | torch.Tensor, V: torch.Tensor, T: float, L: int) -> torch.Tensor:
    """Chapter 9's ball: every token of layer ``k`` of :func:`attention_flow` has norm ``<= (1 + h ||V||)^k r0``.

    ``h = T/L`` and ``r0`` is the largest initial token norm; shape ``(L + 1,)``. As ``L -> ∞`` this
    tends to ``e^{||V|| t} r0``, the bound for the flow.
    """
    v = torch.linalg.matrix_norm(V.double(), ord=2)
    k = torch.arange(L + 1, dtype=torch.float64)
    return torch.as_tensor(r0, dtype=torch.float64) * (1 + T / L * v) ** k


def flow_gronwall_log(A: torch.Tensor, V: torch.Tensor, r0: float, n: int, T: float, L: int,
                      step_constants: torch.Tensor | None = None) -> torch.Tensor:
    """Discrete Grönwall: ``log Π_{j<k} (1 + h Lip_j)``, ``k = 0..L``, bounds ``log(||X_k - Y_k|| / ||X_0 - Y_0||)``.

    ``Lip_j`` defaults to the smaller of Theorem 3.3 and Equation (1) (Theorem 3.5) on the ball of
    :func:`flow_radius_bound`; pass measured per-layer constants as ``step_constants`` (shape ``(L,)``).
    """

    h = T / L
    if step_constants is None:
        R = flow_radius_bound(r0, V, T, L)[:-1]
        step_constants = torch.minimum(bounds.theorem_3_3(A, V, R, n), bounds.theorem_3_5(A, V, R))
    logs = torch.log1p(h * step_constants.double())
    return torch.cat([logs.new_zeros(1), logs.cumsum(0)])


def cluster_labels(Y: torch.Tensor, tol: float) -> torch.Tensor:
    """Single-linkage clusters of the points ``Y`` ``(n, d)``: points closer than ``tol`` share a label, ``(n,)``."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if Y.shape[0] < 2:
        return torch.zeros(Y.shape[0], dtype=torch.long)
    labels = fcluster(linkage(Y.detach().double().cpu().numpy(), "single"), t=tol, criterion="distance")
    return torch.as_tensor(labels - 1, dtype=torch.long)
