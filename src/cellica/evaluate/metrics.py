"""The numbers cellica reports, each defined once (see the README, "Metrics").

All functions take plain arrays and are unit-tested on hand-computed examples.
"""

from __future__ import annotations

import math

import numpy as np

from cellica.core.errors import CellicaError
from cellica.core.scales import constant, moments

TOP_FRACTION = 0.25


def hoyer_sparsity(v: np.ndarray) -> float:
    """Hoyer sparsity ``(sqrt(n) - L1/L2) / (sqrt(n) - 1)`` of a vector.

    1 when a single entry is non-zero, 0 when all entries are equal in magnitude;
    NaN for an all-zero vector (a classifier that used no feature) or n < 2.
    """
    v = np.abs(np.asarray(v, dtype=np.float64)).ravel()
    n = v.size
    l2 = float(np.sqrt((v**2).sum()))
    if n < 2 or l2 == 0.0:
        return float("nan")
    return float((math.sqrt(n) - v.sum() / l2) / (math.sqrt(n) - 1))


def biological_variation(x_pert: np.ndarray, x_ctrl: np.ndarray) -> np.ndarray:
    """Per feature: squared difference of means, perturbed vs controls, over the controls' variance.

    ``(mean(x_pert) - mean(x_ctrl))**2 / var(x_ctrl)`` (population variance of the
    controls, not a pooled one): a standardised effect size squared (Cohen's d^2
    with the control spread), so features on different scales are comparable. A feature
    whose controls do not vary (judged on its own magnitude,
    :func:`cellica.core.scales.constant`) has no control spread to measure an effect in:
    it counts 0, whatever its unit (until #43 its variance was floored at 1e-12 in raw
    units, so a feature in a small unit had its effect cut, and a constant one got an
    effect that depended on its unit).
    """
    x_pert, x_ctrl = np.asarray(x_pert, np.float64), np.asarray(x_ctrl, np.float64)
    mean_ctrl, var = x_ctrl.mean(axis=0), x_ctrl.var(axis=0)
    diff = x_pert.mean(axis=0) - mean_ctrl
    flat = constant(mean_ctrl, np.sqrt(var))
    return np.divide(diff**2, var, out=np.zeros_like(var), where=~flat)


def top_weights(importance: np.ndarray, top_fraction: float = TOP_FRACTION) -> np.ndarray:
    """Each feature's probability of being among the top ``ceil(top_fraction * n)`` by importance.

    Features strictly above the cut are in (weight 1), those below are out (0); the
    features tied *at* the cut share the remaining places equally (weight r/m for r
    places among m tied features). This is the expectation over random tie-breaking,
    which matters for LightGBM: a classifier uses few features, so the cut usually
    falls among the many zero importances.
    """
    imp = np.asarray(importance, np.float64).ravel()
    n = imp.size
    k = max(1, math.ceil(top_fraction * n))
    if k >= n:
        return np.ones(n)
    cut = np.sort(imp)[::-1][k - 1]
    above, tied = imp > cut, imp == cut
    w = above.astype(np.float64)
    w[tied] = (k - above.sum()) / tied.sum()
    return w


def concentration(importance: np.ndarray, bio_heldout: np.ndarray, top_fraction: float = TOP_FRACTION) -> float:
    """Concentration of biological variation in the top features, rescaled to [.., 1].

    ``S`` is the share of the held-out biological variation (``bio_heldout``, see
    :func:`biological_variation`) carried by the top ``k = ceil(top_fraction * n)``
    features ranked by ``importance`` (the training fold's classifier), with ties at
    the cut sharing it (:func:`top_weights`: the expected share over random
    tie-breaking). The score is ``(S - f) / (1 - f)`` with ``f = k / n``, so a
    uniform spread (or a classifier that used no feature) scores 0, everything in
    the top features scores 1, and less than their share scores below 0. NaN when
    there is no variation at all or fewer than 2 features.
    """
    bio = np.asarray(bio_heldout, np.float64).ravel()
    n = bio.size
    total = bio.sum()
    if n < 2 or total <= 0:
        return float("nan")
    w = top_weights(importance, top_fraction)
    f = w.sum() / n
    if f >= 1:
        return float("nan")
    if np.all(w == w[0]):  # every feature tied (no feature used): exactly the uniform share
        return 0.0
    share = float(w @ bio) / total
    return float((share - f) / (1 - f))


def knn_batch_mixing(x: np.ndarray, batches: np.ndarray, k: int = 15) -> float:
    """Mean fraction of each sample's k nearest neighbours from another batch, over the
    fraction expected under perfect mixing; 1 = perfectly mixed, 0 = batches apart."""
    from sklearn.neighbors import NearestNeighbors

    batches = np.asarray(batches)
    n = len(batches)
    k = min(k, n - 1)
    if k < 1 or len(np.unique(batches)) < 2:
        return float("nan")
    nn = NearestNeighbors(n_neighbors=k + 1).fit(x)
    idx = nn.kneighbors(x, return_distance=False)[:, 1:]
    other = (batches[idx] != batches[:, None]).mean(axis=1)
    _, inverse, counts = np.unique(batches, return_inverse=True, return_counts=True)
    expected = 1.0 - (counts[inverse] - 1) / (n - 1)
    return float(np.mean(other / expected))


def mean_roc(curves: list[list[list[float]]], grid: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """Vertical average of per-fold ROC curves on an FPR grid.

    The area under it is the mean of the folds' areas (to the grid's resolution), so
    it agrees with the mean held-out AUROC of the tables, unlike a curve of scores
    pooled over folds (which mixes the folds' score scales).
    """
    fpr = np.linspace(0, 1, grid)
    tprs = [np.interp(fpr, f, t) for f, t in curves if len(f) > 1]
    if not tprs:
        return fpr, np.full(grid, np.nan)
    return fpr, np.mean(tprs, axis=0)


def cross_correlation(xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
    """Pearson correlations between the columns of xa (rows of the result) and of xb."""
    xa, xb = np.asarray(xa, np.float64), np.asarray(xb, np.float64)
    za = (xa - xa.mean(0)) / _spread(xa)
    zb = (xb - xb.mean(0)) / _spread(xb)
    return za.T @ zb / len(xa)


def _spread(x: np.ndarray) -> np.ndarray:
    """Per-column standard deviation, inf for a column constant on its own scale (its
    standardised values, hence its correlations, are then 0)."""
    mean, sd = moments(x)
    return np.where(constant(mean, sd), np.inf, sd)


def mcc(features: np.ndarray, factors: np.ndarray) -> float:
    """Mean correlation coefficient: |corr| between features and true factors, Hungarian-matched, averaged
    over the factors (each factor matched to a different feature)."""
    from scipy.optimize import linear_sum_assignment

    f = np.asarray(features, np.float64)
    z = np.asarray(factors, np.float64)
    if f.shape[0] != z.shape[0]:
        raise CellicaError(f"MCC: {f.shape[0]} samples of features but {z.shape[0]} of factors")
    c = np.abs(cross_correlation(z, f))  # factors x features
    rows, cols = linear_sum_assignment(-c)
    return float(c[rows, cols].mean())
