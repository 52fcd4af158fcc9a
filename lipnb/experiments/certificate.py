"""An audit of what :func:`lipnb.local_lipschitz` certifies, against dense float64 truth on small problems.

Each generator returns a :class:`Problem`: a map, a batch of inputs and the singular values of the Jacobian at
every input, computed in float64 from an explicit matrix (the maps with a prescribed spectrum) or from the dense
Jacobian (:func:`lipnb.jacobian_matrix`, the attention maps). The families are those on which a certificate is
hardest to keep: clustered, repeated and nearly repeated top singular values, saturated softmax attention,
batches whose inputs' top directions cross, float32 maps at large inputs, tiny and huge Jacobians.
:func:`certificate_audit` runs every setting of the estimator on them and :func:`certificate_counts` counts
what the mathematics says cannot happen (and what it allows, the premise's failures).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.attention import MultiHead, self_attention
from ..core.dense import jacobian_matrix
from ..core.jacobian import MultiHeadMap
from ..core.lipschitz import local_lipschitz
from ..results import ResultTable, cached_table, progress

__all__ = [
    "CLUSTER_GAP",
    "CertificateCounts",
    "Problem",
    "certificate_audit",
    "certificate_counts",
    "certificate_flags",
    "cluster_width",
    "crossing",
    "map_rounding",
    "prescribed_spectrum",
    "problem_suite",
    "saturated_attention",
    "settings",
    "spectrum",
    "starts",
]

Map = Callable[[Tensor], Tensor]
CLUSTER_GAP = 0.02          # neighbouring singular values closer than this (relative to σ₁) form one cluster
BATCH = 8                   # inputs per problem batch
MAX_ITER = 100              # products per call: Lanczos needs at most N <= 64; the power iteration may stop short
TRUTH_SLACK = 64 * torch.finfo(torch.float64).eps   # the float64 SVD's own rounding, relative to σ₁


@dataclass(frozen=True)
class Problem:
    """A batch ``X`` ``(B, n, d)`` of a map ``fn`` with the float64 singular values ``singular`` ``(B, N)``
    (descending) of ``D_{X_b} fn`` at each input; ``closed_form``: ``fn`` brings its own Jacobian products."""

    family: str
    fn: Map
    X: Tensor
    singular: Tensor
    closed_form: bool = False


def _orthogonal(N: int, g: torch.Generator) -> Tensor:
    """A Haar-random orthogonal ``(N, N)`` matrix, float64 (QR of a Gaussian matrix, signs fixed)."""
    Q, R = torch.linalg.qr(torch.randn(N, N, generator=g, dtype=torch.float64))
    return Q * torch.sign(torch.diagonal(R))


def spectrum(kind: str, N: int, g: torch.Generator) -> Tensor:
    """Singular values ``(N,)`` descending with a prescribed top: ``"gap-<g>"`` (``1, 1 - g, 1 - 2g``),
    ``"repeated"`` (``1, 1, 1``) or ``"second"`` (``1, 1 - 1e-6``); the rest uniform in ``[0.05, 0.9]``."""
    if kind == "repeated":
        top = [1.0, 1.0, 1.0]
    elif kind == "second":
        top = [1.0, 1.0 - 1e-6]
    elif kind.startswith("gap-"):
        gap = float(kind[4:])
        top = [1.0, 1.0 - gap, 1.0 - 2 * gap]
    else:
        raise ValueError(f"spectrum kind must be 'gap-<g>', 'repeated' or 'second'; got {kind!r}")
    rest = 0.05 + 0.85 * torch.rand(N - len(top), generator=g, dtype=torch.float64)
    return torch.cat([torch.tensor(top, dtype=torch.float64), rest.sort(descending=True).values])


def prescribed_spectrum(spectra: Tensor, n: int, d: int, *, seed: int, dtype: torch.dtype = torch.float64,
                        scale: float = 1.0, linear: bool = False) -> Problem:
    """A map whose Jacobian at input ``b`` has singular values ``scale * spectra[b]`` (up to ``dtype``'s rounding).

    ``linear``: ``x -> U diag(σ) Vᵀ x`` (one spectrum, ``spectra`` ``(N,)``, every input); otherwise the
    quadratic map ``x -> scale · U (Vᵀx)² / 2``, whose Jacobian ``scale · U diag(Vᵀx) Vᵀ`` at ``x_b = V P_b σ_b``
    (``P_b`` a random signed permutation) has the spectrum ``σ_b`` in a direction of its own for every input.
    """
    N = n * d
    g = torch.Generator().manual_seed(seed)
    U, V = (_orthogonal(N, g).to(dtype) for _ in range(2))
    U64, V64 = U.double(), V.double()
    if linear:
        W = (U64 * spectra.to(torch.float64)) @ V64.T
        W = (scale * W).to(dtype)
        X = torch.randn(BATCH, n, d, generator=g, dtype=torch.float64).to(dtype)
        singular = torch.linalg.svdvals(W.double()).expand(BATCH, N)

        def fn(Z: Tensor) -> Tensor:
            return (Z.flatten(1) @ W.to(Z.dtype).T).view(Z.shape)

        return Problem(f"linear {_dtype_name(dtype)}", fn, X, singular.contiguous())
    signs = torch.where(torch.rand(spectra.shape, generator=g) < 0.5, -1.0, 1.0).double()
    order = torch.argsort(torch.rand(spectra.shape, generator=g), dim=1)
    z = torch.gather(spectra.double() * signs, 1, order)
    X = (z @ V64.T).to(dtype).view(len(z), n, d)

    def fn(Z: Tensor) -> Tensor:
        z = Z.flatten(1) @ V.to(Z.dtype)
        return (scale * 0.5 * z.square() @ U.to(Z.dtype).T).view(Z.shape)

    z_true = X.double().flatten(1) @ V64
    J = scale * (U64 * z_true.unsqueeze(1)) @ V64.T
    return Problem(f"prescribed {_dtype_name(dtype)}", fn, X, torch.linalg.svdvals(J))


def crossing(n: int, d: int, *, seed: int, dtype: torch.dtype = torch.float64) -> Problem:
    """Top singular values ``1 ± t`` that cross along the batch (``t`` from ``0.1`` to ``-0.1``), in two fixed
    directions: the first input's top direction is the second one of the last inputs (the quadratic map of
    :func:`prescribed_spectrum`, every input with the same singular directions)."""
    N = n * d
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0.1, -0.1, BATCH, dtype=torch.float64)
    rest = (0.1 + 0.7 * torch.rand(N - 2, generator=g, dtype=torch.float64)).expand(BATCH, N - 2)
    spectra = torch.cat([(1 + t).unsqueeze(1), (1 - t).unsqueeze(1), rest], dim=1)
    V = _orthogonal(N, g).to(dtype)
    U = _orthogonal(N, g).to(dtype)
    X = (spectra @ V.double().T).to(dtype).view(BATCH, n, d)

    def fn(Z: Tensor) -> Tensor:
        return (0.5 * (Z.flatten(1) @ V.to(Z.dtype)).square() @ U.to(Z.dtype).T).view(Z.shape)

    z = X.double().flatten(1) @ V.double()
    J = (U.double() * z.unsqueeze(1)) @ V.double().T
    return Problem(f"crossing {_dtype_name(dtype)}", fn, X, torch.linalg.svdvals(J))


def saturated_attention(n: int, d: int, scale: float, *, seed: int, dtype: torch.dtype = torch.float64,
                        heads: int = 0) -> Problem:
    """Self-attention (Def 2.1, ``heads = 0``, autograd) or a ``MultiHeadMap`` of ``heads`` heads (Def 2.2,
    closed form) at tokens of norm ``scale`` (large: the softmax saturates), with dense float64 truth."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(BATCH, n, d, generator=g, dtype=torch.float64)
    X = (scale * tokens / tokens.norm(dim=-1, keepdim=True)).to(dtype)
    if heads:
        k = max(1, d // heads)
        mh = MultiHead(torch.randn(heads, d, d, generator=g, dtype=torch.float64) / math.sqrt(d),
                       torch.randn(heads, k, d, generator=g, dtype=torch.float64) / math.sqrt(d),
                       torch.randn(heads, d, k, generator=g, dtype=torch.float64) / math.sqrt(k))
        mh = mh.to(dtype=dtype).to(dtype=torch.float64)       # the parameters the dtype can hold
        fn, truth, closed = MultiHeadMap(mh), MultiHeadMap(mh), True
        family = f"multi-head {_dtype_name(dtype)}"
    else:
        A = (torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)).to(dtype).double()
        Vv = (torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)).to(dtype).double()

        def fn(Z: Tensor) -> Tensor:
            return self_attention(Z, A.to(Z.dtype), Vv.to(Z.dtype))

        truth, closed, family = fn, False, f"attention {_dtype_name(dtype)}"
    singular = torch.linalg.svdvals(jacobian_matrix(truth, X.double()))
    return Problem(family, fn, X, singular, closed)


def _dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


def _specs() -> list[Callable[[int], Problem]]:
    """One problem builder per family (a seed in, a batch of :data:`BATCH` inputs out), in a fixed order."""
    f32, f64 = torch.float32, torch.float64

    def spectral(kind: str, linear: bool, dtype: torch.dtype = f64, scale: float = 1.0, n: int = 4,
                 d: int = 4) -> Callable[[int], Problem]:
        def build(seed: int) -> Problem:
            g = torch.Generator().manual_seed(seed + 7)
            if linear:
                return prescribed_spectrum(spectrum(kind, n * d, g), n, d, seed=seed, dtype=dtype, linear=True)
            spectra = torch.stack([spectrum(kind, n * d, g) for _ in range(BATCH)])
            return prescribed_spectrum(spectra, n, d, seed=seed, dtype=dtype, scale=scale)
        return build

    def attention(scale: float, n: int, d: int, dtype: torch.dtype = f64, heads: int = 0) -> Callable[[int], Problem]:
        return lambda seed: saturated_attention(n, d, scale, seed=seed, dtype=dtype, heads=heads)

    return [
        spectral("gap-1e-2", True), spectral("gap-1e-4", False), spectral("gap-1e-6", True),
        spectral("gap-1e-8", False), spectral("repeated", True), spectral("second", False),
        spectral("second", True, n=8, d=8), spectral("gap-1e-3", False, f32),
        lambda seed: crossing(4, 4, seed=seed),
        attention(3.0, 4, 4), attention(6.0, 8, 4), attention(10.0, 6, 8), attention(5.0, 8, 8, heads=2),
        attention(8.0, 6, 4, f32, heads=2), attention(30.0, 4, 4, f32), attention(100.0, 8, 4, f32, heads=2),
        spectral("gap-1e-4", False, f32, scale=1e-23), spectral("gap-1e-4", False, f32, scale=1e20),
        spectral("gap-1e-4", False, f64, scale=1e-200), spectral("gap-1e-4", False, f64, scale=1e200),
    ]


def problem_suite(count: int, seed: int = 0) -> Iterator[Problem]:
    """Problems of every family in turn, :data:`BATCH` inputs each, until ``count`` inputs (seeded)."""
    specs = _specs()
    for i in range(math.ceil(count / BATCH)):
        yield specs[i % len(specs)](seed * 1_000_003 + i)


def settings(problem: Problem, delta: float | None = None) -> list[dict[str, object]]:
    """Every combination of accuracy (``tol`` or ``rtol``), ``start`` (those :func:`starts` offers), ``method`` and
    (closed forms) ``presolve``; with ``delta``, random starts without presolve also ask ``confidence=delta``."""
    out = []
    accuracies = [{"tol": 1e-6}, {"tol": 1e-10}, {"rtol": 1e-4}, {"rtol": 1e-8}]
    for method in ("lanczos", "power"):
        for accuracy in accuracies:
            for start in starts():
                for presolve in ((None, "auto") if problem.closed_form else (None,)):
                    call = {"method": method, **accuracy, "start": start, "presolve": presolve, "max_iter": MAX_ITER}
                    if delta is not None and start == "random" and presolve is None:
                        call["confidence"] = delta
                    out.append(call)
    return out


def cluster_width(singular: Tensor) -> Tensor:
    """The top cluster's relative width ``1 - σ_m / σ₁`` per row of ``singular`` ``(B, N)`` (descending):
    ``σ_m`` the last value reached from ``σ₁`` by steps of at most :data:`CLUSTER_GAP` ``σ₁``."""
    top = singular[:, :1].clamp_min(torch.finfo(torch.float64).tiny)
    steps = (singular[:, :-1] - singular[:, 1:]) / top > CLUSTER_GAP
    broken = torch.cat([steps, torch.ones_like(steps[:, :1])], dim=1)
    last = broken.int().argmax(dim=1)            # index of the cluster's last value
    return 1 - singular.gather(1, last.unsqueeze(1)).squeeze(1) / top.squeeze(1)


def map_rounding(problem: Problem) -> Tensor:
    """``‖J_dtype - J‖₂ / ‖J‖₂`` per input ``(B,)``: how far the Jacobian that ``fn`` computes in its own dtype
    (dense, forward mode) is from the float64 truth; the Rayleigh bound holds for the former (Weyl). Zero in float64."""
    if problem.X.dtype == torch.float64:
        return torch.zeros(len(problem.X), dtype=torch.float64)
    B, n, d = problem.X.shape
    basis = torch.eye(n * d, dtype=problem.X.dtype).view(n * d, 1, n, d).expand(n * d, B, n, d)
    columns = torch.func.vmap(lambda t: torch.func.jvp(problem.fn, (problem.X,), (t,))[1])(basis)
    J = columns.double().reshape(n * d, B, -1).permute(1, 2, 0)
    with torch.no_grad():
        J64 = jacobian_matrix(problem.fn, problem.X.double())
    return torch.linalg.matrix_norm(J - J64, ord=2) / problem.singular[:, 0]


def starts() -> tuple[str, ...]:
    """The starting vectors this ``local_lipschitz`` offers (its ``start`` annotation): ``"random"``, ``"mixed"``
    (the default where a presolve runs), ``"shared"`` (withdrawn)."""
    annotation = str(inspect.signature(local_lipschitz).parameters["start"].annotation)
    return tuple(name for name in ("random", "mixed", "shared") if name in annotation)


def _run(problem: Problem, call: dict[str, object], seed: int, rounding: Tensor) -> dict[str, list]:
    """One call of ``local_lipschitz`` on ``problem``: per input its value, certificate and the truth."""
    B = len(problem.X)
    lip = problem.singular[:, 0]
    raised = ""
    try:
        r = local_lipschitz(problem.fn, problem.X, seed=seed, detailed=True, **call)
        value, error = r.value.double(), r.error.double()
        converged, iterations = r.converged, r.iterations + r.presolve_iterations
        upper = torch.full((B,), math.nan, dtype=torch.float64) if r.upper is None else r.upper.double()
    except (RuntimeError, ValueError, ArithmeticError, torch.linalg.LinAlgError) as err:
        raised = type(err).__name__
        value = error = upper = torch.full((B,), math.nan, dtype=torch.float64)
        converged, iterations = torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.long)
    distance = (problem.singular - value.unsqueeze(1)).abs()
    nearest = problem.singular.gather(1, distance.nan_to_num(math.inf).argmin(1, keepdim=True)).squeeze(1)
    accuracy = f"tol={call['tol']:g}" if "tol" in call else f"rtol={call['rtol']:g}"
    return {"method": [call["method"]] * B, "accuracy": [accuracy] * B, "start": [call["start"]] * B,
            "presolve": [str(call["presolve"])] * B, "rtol": [call.get("rtol", math.nan)] * B,
            "delta": [call.get("confidence", math.nan)] * B, "raised": [raised] * B,
            "lip": lip.tolist(), "rounding": rounding.tolist(), "nearest": nearest.tolist(),
            "width": cluster_width(problem.singular).tolist(),
            "value": value.tolist(), "error": error.tolist(), "converged": converged.int().tolist(),
            "upper": upper.tolist(), "products": iterations.tolist()}


def certificate_audit(count: int = 1024, *, seed: int = 0, delta: float | None = 0.1) -> ResultTable:
    """The certificate of ``local_lipschitz`` against dense float64 truth: one row per input of
    :func:`problem_suite` and per call of :func:`settings`. A cached table; :func:`certificate_counts` reads it."""
    params = {"count": count, "seed": seed, "delta": delta}

    def compute() -> dict[str, list]:
        columns: dict[str, list] = {}
        for p, problem in enumerate(progress(problem_suite(count, seed), "certificate audit",
                                             math.ceil(count / BATCH))):
            rounding = map_rounding(problem)
            for c, call in enumerate(settings(problem, delta)):
                rows = _run(problem, call, seed=p * 101 + c, rounding=rounding)
                rows = {"family": [problem.family] * BATCH, "problem": [p] * BATCH,
                        "input": list(range(p * BATCH, (p + 1) * BATCH)),
                        "dtype": [_dtype_name(problem.X.dtype)] * BATCH, **rows}
                for name, values in rows.items():
                    columns.setdefault(name, []).extend(values)
        return columns

    return cached_table("certificate_audit", params, compute)


def certificate_flags(table: ResultTable) -> dict[str, Tensor]:
    """Per row of :func:`certificate_audit`, what the mathematics allows or forbids (boolean masks) and ``miss``.

    ``above``: ``value > ‖J‖₂ (1 + 16 eps + rounding)`` (Rayleigh: never, up to the run's rounding and the
    map's own, :func:`map_rounding`); ``unbounded``: ``error`` fails to bound ``|σ/value - 1|`` for the nearest
    singular value ``σ``, or the value is not a number (the residual bound: never);
    ``premise``: it bounds that but not ``|‖J‖₂/value - 1|`` (allowed); ``outside``: such a miss
    ``1 - value/‖J‖₂`` beyond the top cluster's width (plus ``error``); ``rtol_missed``: converged at an ``rtol``
    whose value misses ``‖J‖₂`` by more, its nearest singular value being ``‖J‖₂``; ``interval_failed``:
    ``upper < ‖J‖₂``. Every comparison allows the float64 truth's rounding, ``64 eps ‖J‖₂``.
    """
    f = table.frame
    lip, value, error, nearest = (table[c] for c in ("lip", "value", "error", "nearest"))
    eps = torch.tensor([torch.finfo(getattr(torch, t)).eps for t in f["dtype"]], dtype=torch.float64)
    slack = TRUTH_SLACK * lip
    ran = torch.tensor((f["raised"] == "").to_numpy())
    bounds_nearest = (nearest - value).abs() <= error * value + slack
    bounds_top = (lip - value).abs() <= error * value + slack
    miss = 1 - value / lip
    top_is_nearest = (nearest - lip).abs() <= slack
    rtol, upper = table["rtol"], table["upper"]
    converged = table["converged"] > 0
    premise = ran & bounds_nearest & ~bounds_top
    return {
        "ran": ran,
        "above": ran & (value > lip * (1 + 16 * eps + table["rounding"]) + slack),
        "unbounded": ran & ~bounds_nearest,
        "premise": premise,
        "outside": premise & (miss > table["width"] + error),
        "rtol_asked": ran & converged & rtol.isfinite(),
        "rtol_missed": ran & converged & rtol.isfinite() & top_is_nearest & ((value - lip).abs() > rtol * lip + slack),
        "interval": ran & upper.isfinite(),
        "interval_failed": ran & upper.isfinite() & (upper < lip - slack),
        "miss": miss,
    }


@dataclass(frozen=True)
class CertificateCounts:
    """The counts of :func:`certificate_flags` over an audit: ``inputs`` distinct inputs, ``rows`` calls ×
    inputs; ``worst_cluster_ratio`` the largest premise miss over its cluster's width plus ``error`` (``≤ 1``:
    within it)."""

    inputs: int
    rows: int
    raised: int
    above: int
    unbounded: int
    premise: int
    outside: int
    worst_cluster_ratio: float
    rtol_asked: int
    rtol_missed: int
    interval: int
    interval_failed: int
    delta: float


def certificate_counts(table: ResultTable) -> CertificateCounts:
    """Count :func:`certificate_flags` over the audit ``table`` (the numbers the certificate chapter prints)."""
    flags = certificate_flags(table)
    premise = flags["premise"]
    allowed = (table["width"] + table["error"])[premise].clamp_min(torch.finfo(torch.float64).tiny)
    ratio = flags["miss"][premise] / allowed
    delta = table["delta"]
    return CertificateCounts(
        inputs=int(table.frame["input"].nunique()), rows=len(table), raised=int((~flags["ran"]).sum()),
        above=int(flags["above"].sum()), unbounded=int(flags["unbounded"].sum()), premise=int(premise.sum()),
        outside=int(flags["outside"].sum()), worst_cluster_ratio=float(ratio.max()) if len(ratio) else 0.0,
        rtol_asked=int(flags["rtol_asked"].sum()), rtol_missed=int(flags["rtol_missed"].sum()),
        interval=int(flags["interval"].sum()), interval_failed=int(flags["interval_failed"].sum()),
        delta=float(delta[delta.isfinite()].max()) if bool(delta.isfinite().any()) else math.nan)
