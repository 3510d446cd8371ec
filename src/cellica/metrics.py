"""The numbers cellica reports, each defined once (see the README, "Metrics").

All functions take plain arrays and are unit-tested on hand-computed examples.
"""

from __future__ import annotations

import math

import numpy as np

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

    A standardised effect size squared (Cohen's d^2 with the control spread),
    so features on different scales are comparable.
    """
    diff = np.asarray(x_pert, np.float64).mean(axis=0) - np.asarray(x_ctrl, np.float64).mean(axis=0)
    var = np.asarray(x_ctrl, np.float64).var(axis=0)
    return diff**2 / np.maximum(var, 1e-12)


def rank_features(importance: np.ndarray, tie_break: np.ndarray) -> np.ndarray:
    """Feature order, most important first; ties (e.g. the many zero importances of a
    LightGBM model) are broken by ``tie_break`` (larger first), then by index."""
    importance = np.asarray(importance, np.float64)
    tie_break = np.asarray(tie_break, np.float64)
    return np.lexsort((np.arange(importance.size), -tie_break, -importance))


def concentration(order: np.ndarray, bio_heldout: np.ndarray, top_fraction: float = TOP_FRACTION) -> float:
    """Concentration of biological variation in the top features, rescaled to [.., 1].

    ``S`` is the share of the held-out biological variation (``bio_heldout``, see
    :func:`biological_variation`) carried by the first ``ceil(top_fraction * n)``
    features of ``order`` (ranked on training data). The score is
    ``(S - f) / (1 - f)`` with ``f`` the top fraction actually used, so a uniform
    spread scores 0, everything in the top features scores 1, and less than
    their share scores below 0. NaN when there is no variation at all.
    """
    bio = np.asarray(bio_heldout, np.float64)
    n = bio.size
    k = max(1, math.ceil(top_fraction * n))
    total = bio.sum()
    if n < 2 or total <= 0:
        return float("nan")
    share = bio[np.asarray(order)[:k]].sum() / total
    f = k / n
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
