"""What a user would call instead of ``lipnb.local_lipschitz``: SciPy's eigensolvers on the map's Jacobian products.

One input at a time, ``J = D_x fn`` as a ``scipy.sparse.linalg.LinearOperator`` whose products are
``torch.func.jvp`` (``J v``) and ``torch.func.vjp`` (``Jᵀ w``) of the map, in its own dtype (float32 for the
workloads' layers), each re-running the map's forward pass as those functions do:

``svds``
    ``scipy.sparse.linalg.svds(J, k=1, tol=1e-4)``: ARPACK's implicitly restarted Lanczos on ``JᵀJ`` (``tol``
    the relative accuracy of the singular value, :data:`SVDS_TOL`);
``lobpcg``
    ``scipy.sparse.linalg.lobpcg(JᵀJ, x₀, largest=True)`` with one vector, twice, as its ``tol`` is absolute (and
    its default, ``N √eps``, stops at once): :data:`LOBPCG_WARM` iterations first (a rough eigenvalue ``λ̂``), then
    from that vector until its residual is below :data:`LOBPCG_RTOL` ``λ̂``, at most :data:`LOBPCG_MAX_ITER`
    iterations.

Both start from a seeded Gaussian vector per input, and each result is checked against the float64 reference by
the caller (``bench/workloads.py``). Counts are ``JᵀJ`` products (one JVP and one VJP) per input.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, lobpcg, svds
from torch import Tensor

Map = Callable[[Tensor], Tensor]
PEERS = ("svds", "lobpcg")
SVDS_TOL = 1e-4
LOBPCG_RTOL, LOBPCG_WARM, LOBPCG_MAX_ITER = 1e-4, 5, 200


def _products(fn: Map, x: Tensor) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray],
                                          tuple[int, int], list[int]]:
    """``J v`` and ``Jᵀ w`` of ``fn`` at the input ``x`` ``(1, n, d)`` on flat NumPy vectors, the shape of ``J`` and
    a counter of ``Jᵀ``-products."""
    y = fn(x)
    count = [0]

    def matvec(v: np.ndarray) -> np.ndarray:
        u = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32).reshape(x.shape)).to(x.dtype)
        return torch.func.jvp(fn, (x,), (u,))[1].detach().reshape(-1).numpy()

    def rmatvec(w: np.ndarray) -> np.ndarray:
        count[0] += 1
        g = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32).reshape(y.shape)).to(x.dtype)
        return torch.func.vjp(fn, x)[1](g)[0].detach().reshape(-1).numpy()

    return matvec, rmatvec, (y.numel(), x.numel()), count


def _svds(fn: Map, x: Tensor, v0: np.ndarray) -> tuple[float, int, bool]:
    matvec, rmatvec, shape, count = _products(fn, x)
    J = LinearOperator(shape, matvec=matvec, rmatvec=rmatvec, dtype=np.float32)
    try:
        return float(svds(J, k=1, tol=SVDS_TOL, v0=v0, return_singular_vectors=False)[0]), count[0], True
    except Exception:                                          # ARPACK's no-convergence error
        return float("nan"), count[0], False


def _lobpcg(fn: Map, x: Tensor, v0: np.ndarray) -> tuple[float, int, bool]:
    matvec, rmatvec, shape, count = _products(fn, x)
    normal = LinearOperator((shape[1], shape[1]), matvec=lambda v: rmatvec(matvec(v)), dtype=np.float32)
    rough, start = lobpcg(normal, v0[:, None], largest=True, tol=1e-30, maxiter=LOBPCG_WARM)
    tol = LOBPCG_RTOL * float(rough[0])
    lam, _, history = lobpcg(normal, start, largest=True, tol=tol, maxiter=LOBPCG_MAX_ITER,
                             retResidualNormsHistory=True)
    return float(np.sqrt(max(float(lam[0]), 0.0))), count[0], float(np.max(history[-1])) <= tol


def run_peer(method: str, fn: Map, X: Tensor) -> dict[str, list]:
    """``method`` (one of :data:`PEERS`) on every input of ``X``: values, ``JᵀJ`` products and whether it converged."""
    if method not in PEERS:
        raise ValueError(f"unknown peer {method!r}; one of {PEERS}")
    solve = _svds if method == "svds" else _lobpcg
    values, iterations, converged = [], [], []
    for i in range(len(X)):
        v0 = np.random.default_rng(i).standard_normal(X[i].numel()).astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value, products, ok = solve(fn, X[i:i + 1].detach(), v0)
        values.append(value)
        iterations.append(products)
        converged.append(ok)
    return {"values": values, "iterations": iterations, "converged": converged}
