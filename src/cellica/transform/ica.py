"""ICA of already-whitened data: the rotation whose axes are most independent.

The default back-end is an orthogonal-constraint ICA in the style of Picard-O
(Ablin, Cardoso & Gramfort 2018), written for float32 torch so it runs on CPU
BLAS or a GPU:

* the contrast is ``sum_i s_i E[log cosh y_i]`` over the rotated features
  ``y = W x``, with a sign ``s_i`` per component (the "extended" rule) so that
  super- and sub-Gaussian sources are both found; signs start at +1 (super-Gaussian)
  and are revised only at stationary points, never on the near-Gaussian mixtures of
  a random start;
* steps are rotations ``W <- cayley(a E) W`` with ``E`` skew-symmetric (the Cayley
  transform, a cheap stand-in for ``expm``), so ``W`` stays orthogonal and the output white;
* ``E`` is an L-BFGS direction preconditioned by the closed-form approximate
  Hessian ``K_ij = h_i + h_j - g_i - g_j`` (``h = E[psi'(y)]``, ``g = E[y psi(y)]``),
  with a backtracking line search on the contrast, so every step descends;
* it converges when the largest entry of the relative gradient
  ``E[psi(y) y^T] - E[y psi(y)^T]`` is below ``tol``.

A seeded subsample warms the rotation up before the full data refine it. The
fit records the iterations, the final gradient norm and whether it converged;
scikit-learn's FastICA and python-picard are selectable for comparison.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform._rows import column_means, row_blocks

if TYPE_CHECKING:
    from cellica.transform.params import IcaParams

log = get_logger("ica")


@dataclass
class ICAResult:
    """A fitted rotation and how the fit went."""

    rotation: np.ndarray
    diagnostics: dict[str, Any] = field(default_factory=dict)


def amari_distance(w: np.ndarray, a: np.ndarray) -> float:
    """Amari distance between an unmixing ``w`` and a mixing ``a`` (0 = perfect up to
    permutation and scale; 1 = worst)."""
    p = np.abs(np.asarray(w, np.float64) @ np.asarray(a, np.float64))
    n = p.shape[0]
    rows = (p.sum(axis=1) / p.max(axis=1) - 1).sum()
    cols = (p.sum(axis=0) / p.max(axis=0) - 1).sum()
    return float((rows + cols) / (2 * n * (n - 1)))


def haar_rotation(d: int, seed: int) -> np.ndarray:
    """A Haar-distributed random orthogonal matrix (QR of a Gaussian, signs fixed)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))[None, :]


def whiteness_error(x: np.ndarray) -> float:
    """Largest absolute deviation of the covariance of ``x`` from the identity."""
    xc = np.asarray(x, np.float64)
    xc = xc - xc.mean(axis=0)
    cov = xc.T @ xc / max(1, xc.shape[0] - 1)
    return float(np.abs(cov - np.eye(cov.shape[0])).max())


# ---------------------------------------------------------------------- public API
def _fit_cellica(x: np.ndarray, p: IcaParams, seed: int, warm_start_samples: int | None):
    import torch

    from cellica.core.threads import NUMERIC_THREADS
    from cellica.transform._ica_solver import cellica_ica

    n, d = x.shape
    # Small problems are dominated by per-call overhead, where one thread is fastest; large
    # ones use a fixed count (not the machine's), so the result does not depend on it.
    threads_used = 1 if n * d < 2_000_000 else NUMERIC_THREADS
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads_used)
    # Coarse-to-fine: most iterations on a seeded subsample, the rest on all rows.
    w0, stages = None, []
    rng = np.random.default_rng(seed)
    sizes = [m for m in (warm_start_samples,) if 2 * m < n and m >= 20 * d] if warm_start_samples else []
    try:
        for m in sizes:
            sub = np.sort(rng.choice(n, m, replace=False))
            w0, info = cellica_ica(x[sub], p.max_iter, p.tol * 5, seed, p.device, w0=w0)
            stages.append({"samples": int(m), "n_iter": info["n_iter"], "converged": info["converged"]})
        rot, diag = cellica_ica(x, p.max_iter, p.tol, seed, p.device, w0=w0)
    finally:
        torch.set_num_threads(saved_threads)
    diag["threads"] = threads_used
    if stages:
        diag["warm_start"] = stages
    return rot, diag, "logcosh (extended signs)"


def _fit_sklearn(x: np.ndarray, p: IcaParams, seed: int, warm_start_samples: int | None):
    import warnings

    from sklearn.decomposition import FastICA
    from sklearn.exceptions import ConvergenceWarning

    ica = FastICA(n_components=x.shape[1], whiten=False, fun="logcosh", max_iter=p.max_iter, tol=p.tol,
                  random_state=seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        ica.fit(x.astype(np.float64))
    converged = not any(issubclass(c.category, ConvergenceWarning) for c in caught)
    rot = ica.components_
    diag = {"n_iter": int(ica.n_iter_), "converged": converged, "gradient_norm": _relative_gradient(x, rot)}
    return rot, diag, "logcosh (FastICA parallel)"


def _fit_picard(x: np.ndarray, p: IcaParams, seed: int, warm_start_samples: int | None):
    import warnings

    from picard import picard

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        _, rot, _, n_iter = picard(x.T.astype(np.float64), ortho=True, extended=True, whiten=False,
                                   max_iter=p.max_iter, tol=p.tol, random_state=seed, return_n_iter=True)
    converged = not any("did not converge" in str(c.message) for c in caught)
    diag = {"n_iter": int(n_iter), "converged": converged, "gradient_norm": _relative_gradient(x, rot)}
    return rot, diag, "logcosh (Picard-O extended)"


# The registry of ICA back-ends: name -> fit(x, params, seed, warm_start_samples).
BACKENDS = {"cellica": _fit_cellica, "sklearn": _fit_sklearn, "picard": _fit_picard}


def fit_rotation(x: np.ndarray, params: IcaParams | None = None, seed: int = 0,
                 warm_start_samples: int | None = 10000) -> ICAResult:
    """Fit the ICA rotation of white data ``x`` (samples x dims, centred, identity covariance).

    Parameters
    ----------
    x
        Whitened data; ``y = x @ R.T`` are the independent components.
    params
        Back-end (``cellica``: ours, torch float32; ``sklearn``: FastICA, parallel,
        logcosh; ``picard``: python-picard, orthogonal, extended), iteration cap,
        tolerance (ours: max-abs relative gradient) and device (ours only); default
        :class:`cellica.transform.params.IcaParams`.
    seed
        Seed of the initial rotation and of the warm-start subsample.
    warm_start_samples
        Ours: first fit on a seeded subsample of this many rows, then refine on
        all rows (``None``: no warm start).

    Returns
    -------
    ICAResult
        ``rotation`` (orthogonal, dims x dims) and diagnostics: back-end, contrast,
        iterations, final gradient norm, converged, seconds.
    """
    from cellica.transform.params import IcaParams

    p = params or IcaParams()
    x = np.asarray(x, dtype=np.float32)
    n, d = x.shape
    if n <= d:
        raise CellicaError(f"ICA needs more samples than dimensions: {n} samples for {d} dims")
    t0 = time.perf_counter()
    rot, diag, contrast = BACKENDS[p.backend](x, p, seed, warm_start_samples)
    diag = {"backend": p.backend, "contrast": contrast, "max_iter": p.max_iter, "tol": p.tol,
            "seconds": time.perf_counter() - t0, **diag}
    diag["gradient_norm"] = float(diag["gradient_norm"])
    if diag["converged"]:
        log.info("ICA (%s) converged in %d iterations (gradient %.2e) in %.1f s", p.backend, diag["n_iter"],
                 diag["gradient_norm"], diag["seconds"])
    else:
        log.warning("ICA (%s) did NOT converge in %d iterations (gradient %.2e > tol %.1e), %.1f s",
                    p.backend, diag["n_iter"], diag["gradient_norm"], p.tol, diag["seconds"])
    return ICAResult(np.asarray(rot, np.float64), diag)


def _relative_gradient(x: np.ndarray, rot: np.ndarray) -> float:
    """Max-abs skew relative gradient of the extended logcosh contrast (comparable across back-ends)."""
    y = x.astype(np.float64) @ np.asarray(rot, np.float64).T
    psi = np.tanh(y)
    g = psi.T @ y / y.shape[0]
    signs = np.sign((1 - psi**2).mean(axis=0) - np.diag(g))
    g = g * signs[:, None]
    return float(np.abs(g - g.T).max())


def canonicalise(rotation: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Make components comparable between runs: positive skew, sorted by non-Gaussianity.

    Non-Gaussianity is the negentropy proxy ``(E[log cosh y] - E[log cosh nu])^2``
    with ``nu`` standard normal; components are sorted in decreasing order.
    """
    d = rotation.shape[0]
    gauss_logcosh = 0.3745672075  # E[log cosh(nu)], nu ~ N(0, 1)

    def moments(sl):  # y^3 and log cosh y, by row blocks: the fit set is never copied whole
        y = np.asarray(x[sl], np.float64) @ rotation.T
        ay = np.abs(y)
        return np.hstack([y**3, ay + np.log1p(np.exp(-2 * ay)) - np.log(2.0)])

    means = column_means(row_blocks(x.shape[0]), moments)
    skew, logcosh = means[:d], means[d:]
    signs = np.where(skew < 0, -1.0, 1.0)
    negentropy = (logcosh - gauss_logcosh) ** 2
    order = np.argsort(-negentropy, kind="stable")
    rot = (rotation * signs[:, None])[order]
    return rot, {"negentropy": negentropy[order].tolist(), "skew": (skew * signs)[order].tolist()}
