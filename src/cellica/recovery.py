"""How much of a known ground truth a representation carries (synthetic screens).

``linear_probe_r2`` is the cross-validated R^2 of a ridge regression from features
to each target column (e.g. the simulator's latent factors): the standard "linear
probe" of representation learning. Scores are computed on held-out folds, so a
representation cannot score by memorising.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.errors import CellicaError


def linear_probe_r2(x: np.ndarray, y: pd.DataFrame | np.ndarray, n_splits: int = 5, seed: int = 0,
                    alphas: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1000.0)) -> pd.Series:
    """Held-out R^2 of a ridge probe from ``x`` to each column of ``y``.

    Parameters
    ----------
    x
        Features, samples x dims (standardised inside each training fold).
    y
        Targets, samples x k.
    n_splits
        K-fold splits (shuffled with ``seed``).
    alphas
        Ridge penalties, chosen by inner leave-one-out CV on each training fold.

    Returns
    -------
    pandas.Series
        R^2 per target column (1 = perfectly recovered, 0 = no better than the mean).
    """
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.asarray(x, dtype=np.float64)
    y_df = y if isinstance(y, pd.DataFrame) else pd.DataFrame(np.asarray(y))
    if x.shape[0] != len(y_df):
        raise CellicaError(f"linear probe: {x.shape[0]} samples of features but {len(y_df)} of targets")
    if x.shape[0] < 2 * n_splits:
        raise CellicaError(f"linear probe: {x.shape[0]} samples are too few for {n_splits}-fold CV")
    yv = y_df.to_numpy(dtype=np.float64)
    pred = np.zeros_like(yv)
    for train, test in KFold(n_splits, shuffle=True, random_state=seed).split(x):
        model = make_pipeline(StandardScaler(), RidgeCV(alphas=alphas))
        pred[test] = model.fit(x[train], yv[train]).predict(x[test])
    ss_res = ((yv - pred) ** 2).sum(axis=0)
    ss_tot = ((yv - yv.mean(axis=0)) ** 2).sum(axis=0)
    return pd.Series(1.0 - ss_res / np.maximum(ss_tot, 1e-12), index=y_df.columns, name="r2")
