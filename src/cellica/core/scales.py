"""Per-feature statistics judged on each feature's own scale.

Real profiles mix units: a CellProfiler area is ~1e3 in its unit, a Zernike moment ~1e-4 in
its own. Every per-feature statistic cellica computes (a standard deviation to divide by, a
variance under a ratio, a test for "constant") is therefore accumulated in float64 and judged
against the same feature's own magnitude, never against another feature's: multiplying a
feature by 10^k or adding a constant to it moves its statistics exactly as it moves the
feature, and nothing else (``tests/test_scales.py``, and the whole DAG in
``tests/test_invariance.py``).

A feature is *constant* on a set of rows when its standard deviation is at most
:data:`CONSTANT_RTOL` times its mean magnitude (exactly 0 for a feature whose every value is
0). Values stored as float32 that differ at all differ by at least one float32 ulp
(~6e-8 relative), which gives a standard deviation far above that tolerance on any realistic
number of rows; the float64 rounding of the mean of equal values (~1e-16 relative) stays far
below it.
"""

from __future__ import annotations

import numpy as np

CONSTANT_RTOL = 1e-12


def moments(x: np.ndarray, ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and standard deviation of ``x`` (rows x features), in float64.

    Parameters
    ----------
    x
        The rows, any real dtype (converted to float64 first).
    ddof
        Delta degrees of freedom of the standard deviation.

    Returns
    -------
    mean, sd : numpy.ndarray
        One float64 value per column.
    """
    x = np.asarray(x, np.float64)
    return x.mean(axis=0), x.std(axis=0, ddof=ddof)


def constant(mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Which features are constant, each judged on its own magnitude (see the module's text).

    Parameters
    ----------
    mean, sd
        Per-feature mean and standard deviation (:func:`moments`).

    Returns
    -------
    numpy.ndarray
        Boolean mask, True where ``sd <= CONSTANT_RTOL * |mean|`` (``sd == 0`` included).
    """
    mean, sd = np.asarray(mean, np.float64), np.asarray(sd, np.float64)
    return sd <= CONSTANT_RTOL * np.abs(mean)


def inverse_scale(mean: np.ndarray, sd: np.ndarray, fill: float = 1.0) -> np.ndarray:
    """``1 / sd`` per feature, and ``fill`` where the feature is :func:`constant` (it has no
    spread to divide by; what a caller does with such a feature it says itself).

    Parameters
    ----------
    mean, sd
        Per-feature mean and standard deviation.
    fill
        The factor given to constant features.
    """
    const = constant(mean, sd)
    with np.errstate(divide="ignore"):
        return np.where(const, fill, 1.0 / np.where(const, 1.0, sd))


def spread_orders(sd: np.ndarray, mean: np.ndarray | None = None) -> float:
    """Orders of magnitude between the largest and smallest non-constant standard deviation
    (0 with fewer than two such features): how far apart the features' units are."""
    sd = np.asarray(sd, np.float64)
    keep = sd > 0 if mean is None else ~constant(mean, sd)
    if keep.sum() < 2:
        return 0.0
    return float(np.log10(sd[keep].max() / sd[keep].min()))
