"""How much of a known ground truth a representation carries (synthetic screens).

``linear_probe_r2`` is the cross-validated R^2 of a ridge regression from features
to each target column (e.g. the simulator's latent factors): the standard "linear
probe" of representation learning. Scores are computed on held-out folds, so a
representation cannot score by memorising.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.scales import constant, moments


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


def truth_recovery(adata, latents: pd.DataFrame, batches: pd.DataFrame | None = None, max_samples: int = 5000,
                   seed: int = 0) -> dict[str, float]:
    """Ground-truth recovery of one variant's features on a simulated screen.

    Parameters
    ----------
    adata
        Features (AnnData, ``obs_names`` = tile ids, ``obs['plate']``).
    latents
        The store's ``ground_truth/latents`` (``tile_id`` + one column per factor), or a
        ``features.truth`` table read by :func:`read_truth`.
    batches
        The store's ``ground_truth/batches`` (technical parameters per ``plate``); None
        when unknown (``truth_batch_r2`` is then NaN).
    max_samples
        Seeded subsample cap (the probes are cross-validated ridge fits).

    Returns
    -------
    dict
        ``truth_mcc`` (mean |corr| of Hungarian-matched feature/factor pairs),
        ``truth_factor_r2`` (mean held-out linear-probe R^2 of the factors),
        ``truth_batch_r2`` (mean probe R^2 of the plates' technical parameters:
        batch information left; lower is better) and InfoM / InfoE / InfoC
        (:func:`infomec`).
    """
    from cellica.evaluate.metrics import mcc

    factors = [c for c in latents.columns if c != "tile_id"]
    z = latents.set_index("tile_id").reindex(adata.obs_names)[factors]
    if z.isna().any().any():
        raise CellicaError("ground-truth recovery: the features' samples are not the simulated store's tiles "
                           f"(e.g. {list(adata.obs_names[z.isna().any(axis=1).to_numpy()][:3])} have no true factors)")
    x = np.asarray(adata.X, np.float64)
    pick = np.arange(len(x))
    if len(x) > max_samples:
        pick = np.sort(np.random.default_rng(seed).choice(len(x), max_samples, replace=False))
    out = {"truth_mcc": mcc(x, z.to_numpy()),
           "truth_factor_r2": float(linear_probe_r2(x[pick], z.iloc[pick], seed=seed).mean()),
           "truth_batch_r2": float("nan")}
    if batches is not None:
        params = [c for c in batches.columns if c not in ("batch", "plate", "gradient_angle")]
        tech = batches.set_index("plate").reindex(adata.obs["plate"].astype(str))[params]
        if tech.isna().any().any():
            raise CellicaError(
                "ground-truth recovery: plates of the features are missing from the store's batches table"
            )
        tech = tech.iloc[pick]
        tech = tech.loc[:, tech.std() > 0]  # a parameter constant over the sampled plates has no R^2
        if tech.shape[1]:
            out["truth_batch_r2"] = float(linear_probe_r2(x[pick], tech, seed=seed).mean())
    info = infomec(x[pick], z.iloc[pick].to_numpy())
    out.update(truth_infom=info["infom"], truth_infoe=info["infoe"], truth_infoc=info["infoc"])
    return out


def discretise(v: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """Equal-frequency bin codes per column (ties share a bin; a constant column is one bin)."""
    v = np.asarray(v, np.float64)
    v = v[:, None] if v.ndim == 1 else v
    codes = np.empty(v.shape, np.int64)
    for j in range(v.shape[1]):
        edges = np.unique(np.quantile(v[:, j], np.arange(1, n_bins) / n_bins))
        codes[:, j] = np.searchsorted(edges, v[:, j], side="right")
    return codes


def _entropy(codes: np.ndarray) -> float:
    p = np.bincount(codes) / codes.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def _mutual_information(a: np.ndarray, b: np.ndarray) -> float:
    """I(a; b) in nats of two discrete code vectors, from their contingency table."""
    joint = a * (int(b.max()) + 1) + b
    return max(0.0, _entropy(a) + _entropy(b) - _entropy(joint))


def normalised_mi(sources: np.ndarray, latents: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """``NMI[i, j] = I(s_i; z_j) / H(s_i)`` (sources x latents), both discretised into
    ``n_bins`` equal-frequency bins; 0 for a source with no entropy."""
    s, z = discretise(sources, n_bins), discretise(latents, n_bins)
    out = np.zeros((s.shape[1], z.shape[1]))
    for i in range(s.shape[1]):
        h = _entropy(s[:, i])
        if h > 0:
            out[i] = [_mutual_information(s[:, i], z[:, j]) / h for j in range(z.shape[1])]
    return out


def infomec(latents: np.ndarray, sources: np.ndarray, n_bins: int = 10) -> dict[str, float]:
    """InfoM, InfoE and InfoC (Hsu et al. 2023, "Disentanglement via latent quantization").

    With ``NMI`` from :func:`normalised_mi` over the *active* latents (those that vary,
    each judged on its own magnitude), ``n_s`` sources and ``n_z`` active latents:

    * InfoM (modularity): mean over latents of ``max_i NMI_ij / sum_i NMI_ij``, rescaled
      from ``[1/n_s, 1]`` to ``[0, 1]``: each latent informs about one source.
    * InfoC (compactness): mean over sources of ``max_j NMI_ij / sum_j NMI_ij``, rescaled
      from ``[1/n_z, 1]``: each source is captured by one latent.
    * InfoE (explicitness): mean over sources of ``1 - H(s_i | z) / H(s_i)``, both
      entropies the log loss of a class-balanced multinomial logistic regression (from
      the latents, and from no input), fit and scored on the same samples as defined.

    Latents (or sources) with no information at all are left out of InfoM (InfoC).
    NaN when fewer than 2 sources or 2 active latents remain.
    """
    z = np.asarray(latents, np.float64)
    s = np.asarray(sources, np.float64)
    active = ~constant(*moments(z))  # each latent on its own scale (cellica.core.scales), never another's
    nmi = normalised_mi(s, z[:, active], n_bins)
    n_s, n_z = nmi.shape
    nan = float("nan")
    if n_s < 2 or n_z < 2:
        return {"infom": nan, "infoe": nan, "infoc": nan}
    col, row = nmi.sum(axis=0), nmi.sum(axis=1)
    m = nmi[:, col > 0].max(axis=0) / col[col > 0]
    c = nmi[row > 0].max(axis=1) / row[row > 0]
    infom = (m.mean() - 1 / n_s) / (1 - 1 / n_s) if m.size else nan
    infoc = (c.mean() - 1 / n_z) / (1 - 1 / n_z) if c.size else nan
    return {"infom": float(infom), "infoe": _infoe(z[:, active], discretise(s, n_bins)), "infoc": float(infoc)}


def _infoe(z: np.ndarray, s_codes: np.ndarray) -> float:
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss
    from sklearn.preprocessing import StandardScaler

    z = StandardScaler().fit_transform(z)
    scores = []
    for i in range(s_codes.shape[1]):
        y = s_codes[:, i]
        if np.unique(y).size < 2:
            continue
        losses = []
        for inputs in (z, np.zeros((len(y), 1))):
            # Unpenalised, at most 100 lbfgs iterations, as the metric's reference implementation:
            # on separable data the fit never "converges", and more iterations only cost time.
            model = LogisticRegression(C=np.inf, class_weight="balanced", max_iter=100)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                losses.append(log_loss(y, model.fit(inputs, y).predict_proba(inputs)))
        scores.append(1.0 - losses[0] / losses[1])
    return float(np.mean(scores)) if scores else float("nan")


def read_truth(path) -> dict[str, pd.DataFrame | None]:
    """Ground truth from the tables of a simulated screen, or from a table of true factors.

    Parameters
    ----------
    path
        The folder ``cellica export-truth`` writes from a simulated store (``latents``,
        the genes' ``effects`` and the plates' technical parameters, ``batches``; the
        evaluation never opens a tile store), or a ``.parquet`` / ``.csv`` /
        ``.tsv`` table with a ``sample_id`` (or ``tile_id``) column matching the features'
        sample ids and one numeric column per true factor (``features.truth``, for
        embedding-level simulations).

    Returns
    -------
    dict
        ``latents`` (``tile_id`` + factors), ``effects`` and ``batches`` (None for a table).
    """
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        raise CellicaError(f"ground truth {path} does not exist")
    if path.is_dir():
        from cellica.core.atomic import read_parquet

        if not (path / "latents.parquet").is_file():
            raise CellicaError(f"ground truth {path}: not a folder of truth tables (latents.parquet, effects.parquet, "
                               "batches.parquet); a simulated store's are written by `cellica export-truth STORE --out "
                               "FOLDER`")
        return {name: read_parquet(path / f"{name}.parquet", f"ground-truth table {name}")
                for name in ("latents", "effects", "batches")}
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            table = pd.read_parquet(path)
        elif name.endswith((".csv", ".csv.gz", ".tsv", ".tsv.gz")):
            table = pd.read_csv(path, sep="\t" if ".tsv" in name else ",")
        else:
            raise CellicaError(f"ground truth {path}: expected a tile store or a .parquet/.csv/.tsv table of true "
                               "factors")
    except (OSError, ValueError) as exc:
        raise CellicaError(f"ground truth {path}: cannot read ({type(exc).__name__}: {exc})") from None
    key = next((c for c in ("sample_id", "tile_id") if c in table.columns), None)
    if key is None:
        raise CellicaError(f"ground truth {path}: no sample_id column (the features' sample ids); columns: "
                           f"{list(table.columns)[:8]}")
    factors = [c for c in table.columns if c != key]
    bad = [c for c in factors if not pd.api.types.is_numeric_dtype(table[c])]
    if bad or not factors:
        raise CellicaError(f"ground truth {path}: factor columns must be numeric, got {bad[:5] or 'none'}")
    if table[key].duplicated().any():
        raise CellicaError(f"ground truth {path}: repeated sample ids, e.g. "
                           f"{table.loc[table[key].duplicated(), key].head(3).tolist()}")
    latents = table.rename(columns={key: "tile_id"})
    latents["tile_id"] = latents["tile_id"].astype(str)
    return {"latents": latents, "effects": None, "batches": None}
