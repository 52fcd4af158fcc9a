"""The schemas of the benchmark records, typed: what ``bench/lipschitz.py`` writes (:class:`LipschitzRecord`),
what ``bench/workloads.py`` writes (:class:`WorkloadRecord`) and what ``bench/paper_profile.py`` writes
(:class:`PaperProfileRecord`), each a tree of frozen dataclasses read from the JSON by ``from_json``, a missing
or misshapen field a ValueError naming the record and the field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CallResult",
    "ColdTimes",
    "CostModel",
    "DefaultCallSummary",
    "LipnbDefaults",
    "LipschitzRecord",
    "LipschitzRun",
    "LoadAverage",
    "MethodResult",
    "Oracle",
    "PaperMethod",
    "PaperProfileRecord",
    "ProductCost",
    "Reference",
    "Speedup",
    "Spread",
    "SweepTiming",
    "TimeSplit",
    "Versions",
    "WorkloadRecord",
    "WorkloadRun",
]


def _convert(hint: Any, value: Any, record: str, path: str) -> Any:
    """``value`` (parsed JSON, at ``path`` in ``record``) as the type ``hint``: records recursively, lists as
    tuples, the rest as is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return None if value is None else _convert(next(a for a in args if a is not type(None)), value, record, path)
    if isinstance(hint, type) and issubclass(hint, _Json):
        return hint._parse(value, record, path)
    if origin in (tuple, dict):
        _expect(list if origin is tuple else dict, value, record, path)
        if origin is tuple:
            return tuple(_convert(args[0], v, record, f"{path}[{i}]") for i, v in enumerate(value))
        return {k: _convert(args[1], v, record, f"{path}[{k!r}]") for k, v in value.items()}
    return value


def _expect(kind: type, value: Any, record: str, path: str) -> None:
    if not isinstance(value, kind):
        raise ValueError(f"benchmark record {record}: {path or 'the record'} should be a JSON "
                         f"{'list' if kind is list else 'object'}, not {type(value).__name__}")


_R = typing.TypeVar("_R", bound="_Json")


class _Json:
    """A record read from JSON by :meth:`from_json`: a frozen dataclass whose fields are the JSON keys."""

    @classmethod
    def from_json(cls: type[_R], data: dict, where: str | None = None) -> _R:
        """The record of the JSON object ``data``; ``where`` names it in errors: a field missing (or of the wrong
        shape) is a ValueError naming the record and the field."""
        return cls._parse(data, where or cls.__name__, "")

    @classmethod
    def _parse(cls: type[_R], data: Any, record: str, path: str) -> _R:
        _expect(dict, data, record, path)
        hints, values = typing.get_type_hints(cls), {}
        for field in dataclasses.fields(cls):
            where = f"{path}.{field.name}" if path else field.name
            if field.name in data:
                values[field.name] = _convert(hints[field.name], data[field.name], record, where)
            elif field.default is dataclasses.MISSING:
                raise ValueError(f"benchmark record {record}: the field {where} is missing")
        return cls(**values)


@dataclass(frozen=True)
class LoadAverage(_Json):
    """The machine's 1, 5 and 15 minute load averages when the benchmark started and ended."""
    start: tuple[float, ...]
    end: tuple[float, ...]


@dataclass(frozen=True)
class Versions(_Json):
    """The versions of Python, torch, transformers and lipnb, and the git commit, the benchmark ran with."""
    python: str
    torch: str
    transformers: str
    lipnb: str
    git: str


@dataclass(frozen=True)
class Oracle(_Json):
    """How the oracle stops the paper's loop: within ``rtol`` of the reference, after at most ``max_iter`` steps."""
    rtol: float
    max_iter: int


@dataclass(frozen=True)
class PaperMethod(_Json):
    """The paper's loop as run: its stopping tolerance, cap and dtype (and its products, or its oracle)."""
    tol: float
    max_iter: int
    dtype: str
    products: str | None = None
    oracle: Oracle | None = None


@dataclass(frozen=True)
class LipnbDefaults(_Json):
    """``local_lipschitz``'s defaults when the benchmark ran (a tolerance ``tol`` or ``rtol``)."""
    method: str
    max_iter: int
    presolve: str
    tol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class Reference(_Json):
    """The float64 ARPACK reference of each input, with its certificate on the float64 module."""
    values: tuple[float, ...]
    module_rayleigh_gap: tuple[float, ...]
    module_residual: tuple[float, ...]
    arpack_products: tuple[int, ...]


@dataclass(frozen=True)
class CostModel(_Json):
    """The cost model's FLOPs of one linearisation, one JᵀJ product and one attention pass."""
    linearize: int
    product: int
    attention: int


@dataclass(frozen=True)
class MethodResult(_Json):
    """One method on one run: its timings (s), steps, estimates and errors, FLOPs and memory."""
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    median_wall_s: float
    median_cpu_s: float
    per_input_s: float
    peak_MiB: float
    iterations: tuple[int, ...]
    mean_iterations: float
    mean_presolve_iterations: float
    dtype: str
    converged: int
    values: tuple[float, ...]
    max_rel_error: float
    median_rel_error: float
    flops_per_product: int
    flops_linearize: int
    achieved_flops: float
    fraction_of_peak: float


@dataclass(frozen=True)
class LipschitzRun(_Json):
    """One map and length of ``bench/lipschitz.py``: each method's result and its speedup over the paper's."""
    model: str
    layer: int
    kind: str
    n: int
    batch: int
    d: int
    reference: Reference
    forward_s: float
    cost_model: CostModel
    methods: dict[str, MethodResult]
    speedup: dict[str, float]


@dataclass(frozen=True)
class LipschitzRecord(_Json):
    """A record of ``bench/lipschitz.py``: where and how it ran, and its runs."""
    schema: int
    benchmark: str
    date: str
    duration_s: float
    quick: bool
    device: str
    device_name: str
    threads: int
    load_average: LoadAverage
    peak_flops_by_dtype: dict[str, float]
    versions: Versions
    command: str
    paper_method: PaperMethod
    lipnb_defaults: LipnbDefaults
    lipnb_tol: float
    runs: tuple[LipschitzRun, ...]
    provenance_note: str | None = None

    def run(self, n: int, kind: str = "self") -> LipschitzRun:
        """The run at length ``n`` of the map ``kind``."""
        for row in self.runs:
            if row.n == n and row.kind == kind:
                return row
        raise LookupError(f"no run with n = {n} and kind {kind!r} in the record")


@dataclass(frozen=True)
class Spread(_Json):
    """The median, smallest and largest of repeated timings (s)."""
    median: float
    min: float
    max: float


@dataclass(frozen=True)
class ColdTimes(_Json):
    """Wall and CPU timings of a cold first call, after ``malloc_trim``."""
    wall: Spread
    cpu: Spread


@dataclass(frozen=True)
class TimeSplit(_Json):
    """Where a call's time goes: linearising, JᵀJ products and the solver (s), and products per input; of the
    products, those made with the low-precision twin (the bfloat16 presolve and relaxed steps), where recorded."""
    wall_s: float
    cpu_s: float
    linearize_wall_s: float
    linearize_cpu_s: float
    products_wall_s: float
    products_cpu_s: float
    solver_wall_s: float
    solver_cpu_s: float
    products_per_input: float
    low_products_wall_s: float | None = None
    low_products_cpu_s: float | None = None
    low_products_per_input: float | None = None


@dataclass(frozen=True)
class CallResult(_Json):
    """One call (the paper's loop or a ``local_lipschitz`` call) on one workload: timings, estimates, errors."""
    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    wall: Spread
    cpu: Spread
    max_rel_error: float
    values: tuple[float, ...]
    mean_iterations: float
    converged: int
    cold_wall_s: tuple[float, ...] | None = None
    cold_cpu_s: tuple[float, ...] | None = None
    cold: ColdTimes | None = None
    options: dict[str, str] | None = None
    mean_presolve_iterations: float | None = None
    max_error_bound: float | None = None
    split: TimeSplit | None = None


@dataclass(frozen=True)
class Speedup(_Json):
    """A baseline's median time over a call's, in wall and CPU time (with the range of the repeats' ratios)."""
    wall: float
    cpu: float
    wall_range: tuple[float, ...] | None = None
    cpu_range: tuple[float, ...] | None = None


@dataclass(frozen=True)
class ProductCost(_Json):
    """The measured seconds of one forward pass, one linearisation and one JᵀJ product of a workload."""
    forward_wall_s: float
    forward_cpu_s: float
    linearize_wall_s: float
    linearize_cpu_s: float
    product_wall_s: float
    product_cpu_s: float


@dataclass(frozen=True)
class DefaultCallSummary(_Json):
    """The default call's CPU-time speedups, the paper's largest error and the products' share of CPU time; where
    recorded, its speedups over the peers a user would call instead (``bench/peers.py``) and their largest errors."""
    cpu_vs_paper: float
    cpu_vs_oracle: float
    paper_max_rel_error: float
    baseline: str
    cpu_ratio: float
    products_cpu_share: float
    cpu_vs_peers: dict[str, float] | None = None
    peers_max_rel_error: dict[str, float] | None = None


@dataclass(frozen=True)
class WorkloadRun(_Json):
    """One workload of ``bench/workloads.py``: each call's result and its speedups over the paper's loops; where
    recorded, the peers' results (SciPy's ``svds`` and ``lobpcg``, ``bench/peers.py``)."""
    workload: str
    threads: int
    model: str
    layer: int
    n: int
    batch: int
    d: int
    reference: tuple[float, ...]
    cost: ProductCost
    methods: dict[str, CallResult]
    speedup: dict[str, Speedup]
    speedup_oracle: dict[str, Speedup]
    speedup_cold: dict[str, Speedup]
    default_call: DefaultCallSummary
    peers: dict[str, CallResult] | None = None


@dataclass(frozen=True)
class WorkloadRecord(_Json):
    """A record of ``bench/workloads.py``: where and how it ran, the calls it timed, and its runs."""
    schema: int
    benchmark: str
    date: str
    duration_s: float
    device: str
    device_name: str
    threads: dict[str, int]
    load_average: LoadAverage
    versions: Versions
    command: str
    calls: dict[str, dict[str, str]]
    paper_method: PaperMethod
    runs: tuple[WorkloadRun, ...]


@dataclass(frozen=True)
class SweepTiming(_Json):
    """One sweep of ``bench/paper_profile.py``: its label, its layer calls, whether it ran within the budget, and
    if it ran, the rows it measured and its wall-clock seconds from an empty results cache."""
    sweep: str
    calls: int
    ran: bool
    rows: int | None = None
    wall_s: float | None = None


@dataclass(frozen=True)
class PaperProfileRecord(_Json):
    """A record of ``bench/paper_profile.py``: where and how it ran, and each sweep of the profile it timed."""
    schema: int
    benchmark: str
    profile: str
    date: str
    duration_s: float
    device: str
    device_name: str
    threads: int
    versions: Versions
    command: str
    runs: tuple[SweepTiming, ...]
    provenance_note: str | None = None
