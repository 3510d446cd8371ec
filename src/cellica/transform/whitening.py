"""PCA whitening of a fit set: the one routine behind the ``pca`` family of transforms and
the ICA map of ``cellica align``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform._rows import covariance

log = get_logger("transforms")


@dataclass
class Whitening:
    """``z = (x - mean) @ components.T * scale`` has identity covariance on the fit set; each
    component's largest loading is positive (scikit-learn's sign convention)."""

    mean: np.ndarray
    components: np.ndarray  # k x d
    scale: np.ndarray  # k
    info: dict[str, Any] = field(default_factory=dict)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """``x`` projected on the whitening's components and scaled to unit variance."""
        return (x - self.mean) @ self.components.T * self.scale

    @property
    def mixing(self) -> np.ndarray:
        """The d x k mixing: ``x ~= z @ mixing.T + mean`` on the kept components."""
        return (self.components / self.scale[:, None]).T


def fit_whitening(fit: np.ndarray, n_components: float | None, eig_floor: float, source: str,
                  label: str = "pca") -> Whitening:
    """Whitening fit on ``fit`` (rows x features) from the eigenvectors of its covariance.

    Parameters
    ----------
    fit
        The fit set, rows x features.
    n_components
        A count (>= 1), a fraction of the variance (< 1), or None for every direction with
        an eigenvalue above ``eig_floor`` x the largest.
    eig_floor
        Eigenvalues below this fraction of the largest are floored (explicit count or
        fraction) or dropped (None), so that tiny components don't explode.
    source, label
        Named in messages.
    """
    n, d = fit.shape
    mean = fit.mean(axis=0)
    cov = covariance(fit - mean)
    eigval, eigvec = np.linalg.eigh(cov)
    order = np.argsort(eigval)[::-1]
    eigval, eigvec = eigval[order], eigvec[:, order]
    # An eigenvector's sign is LAPACK's choice (MKL and OpenBLAS differ), and LightGBM is not
    # sign-invariant (its bins are laid out around 0): fix it as scikit-learn's PCA does, the
    # largest loading of each component positive, so the numbers do not depend on the library.
    eigvec = eigvec * np.sign(eigvec[np.argmax(np.abs(eigvec), axis=0), np.arange(d)])
    k = n_kept(eigval, n, d, n_components, eig_floor, source, label)
    floor = eig_floor * max(float(eigval[0]), 1e-30)
    lam = np.maximum(eigval[:k], floor)
    info = {"n_components": int(k), "fit_rows": int(n),
            "explained_variance_ratio": float(eigval[:k].sum() / max(eigval.sum(), 1e-30)),
            "floored_components": int((eigval[:k] < floor).sum()), "eigenvalues_top": eigval[: min(k, 10)].tolist()}
    return Whitening(mean, eigvec[:, :k].T, 1.0 / np.sqrt(lam), info)


def n_kept(eigval: np.ndarray, n: int, d: int, n_components: float | None, eig_floor: float, source: str,
           label: str) -> int:
    """How many components a whitening keeps (see :func:`fit_whitening`)."""
    rank_limit = min(d, n - 1)
    if n_components is None:
        if n - 1 < d:
            raise CellicaError(
                f"{source}: {n} fit rows for {d} features: whitening impossible (the covariance has rank "
                f"<= {n - 1}); set n_components to at most {n - 1} (e.g. {max(1, min(d, (n - 1) // 2))})")
        # Directions with (numerically) no variance carry nothing and would not be white: drop them.
        k = int((eigval > eig_floor * max(float(eigval[0]), 1e-30)).sum())
        if k < d:
            log.warning("%s: %d of %d directions have no variance on the fit set (eigenvalue <= %.0e x the "
                        "largest); keeping %d components", label, d - k, d, eig_floor, k)
        return k
    if n_components >= 1:
        k = int(n_components)
        if k > rank_limit:
            raise CellicaError(f"{source}: n_components {k} exceeds what {n} fit rows x {d} features allow "
                               f"({rank_limit}); lower it")
        return k
    frac = np.cumsum(eigval) / max(eigval.sum(), 1e-30)
    return int(min(np.searchsorted(frac, n_components) + 1, rank_limit))
