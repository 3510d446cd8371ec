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


def truth_recovery(adata, latents: pd.DataFrame, batches: pd.DataFrame, max_samples: int = 5000,
                   seed: int = 0) -> dict[str, float]:
    """Ground-truth recovery of one variant's features on a simulated screen.

    Parameters
    ----------
    adata
        Features (AnnData, ``obs_names`` = tile ids, ``obs['plate']``).
    latents
        The store's ``ground_truth/latents`` (``tile_id`` + one column per factor).
    batches
        The store's ``ground_truth/batches`` (technical parameters per ``plate``).
    max_samples
        Seeded subsample cap (the probes are cross-validated ridge fits).

    Returns
    -------
    dict
        ``truth_mcc`` (mean |corr| of Hungarian-matched feature/factor pairs),
        ``truth_factor_r2`` (mean held-out linear-probe R^2 of the factors) and
        ``truth_batch_r2`` (mean probe R^2 of the plates' technical parameters:
        batch information left; lower is better).
    """
    from cellica.align import mcc

    factors = [c for c in latents.columns if c != "tile_id"]
    z = latents.set_index("tile_id").reindex(adata.obs_names)[factors]
    if z.isna().any().any():
        raise CellicaError("ground-truth recovery: the features' samples are not the simulated store's tiles")
    params = [c for c in batches.columns if c not in ("batch", "plate", "gradient_angle")]
    tech = batches.set_index("plate").reindex(adata.obs["plate"].astype(str))[params]
    if tech.isna().any().any():
        raise CellicaError("ground-truth recovery: plates of the features are missing from the store's batches table")
    x = np.asarray(adata.X, np.float64)
    pick = np.arange(len(x))
    if len(x) > max_samples:
        pick = np.sort(np.random.default_rng(seed).choice(len(x), max_samples, replace=False))
    tech = tech.iloc[pick]
    tech = tech.loc[:, tech.std() > 0]  # a parameter constant over the sampled plates has no R^2
    return {
        "truth_mcc": mcc(x, z.to_numpy()),
        "truth_factor_r2": float(linear_probe_r2(x[pick], z.iloc[pick], seed=seed).mean()),
        "truth_batch_r2": float(linear_probe_r2(x[pick], tech, seed=seed).mean()) if tech.shape[1] else float("nan"),
    }
