"""The base of every transform: which controls fit it (a seeded split per batch), the
per-batch corrections, and :class:`Transform` (the ``base`` variant: the identity),
an estimator on AnnData that saves to a small ``.npz`` (arrays plus JSON; never pickle).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from cellica import __version__
from cellica.core.adata import make_adata
from cellica.core.atomic import atomic_output
from cellica.core.contracts import FIT_COL
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.core.threads import fixed_threads
from cellica.transform.params import TransformParams
from cellica.transform.rows import row_blocks

log = get_logger("transforms")


def controls_mask(obs: pd.DataFrame) -> np.ndarray:
    """The controls whose statistics the transforms use (those marked ``transform_fit``)."""
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    return ctrl & obs[FIT_COL].to_numpy(dtype=bool) if FIT_COL in obs else ctrl


def usable_rows(obs: pd.DataFrame) -> np.ndarray:
    """All samples except the controls held back for evaluation."""
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    return ~ctrl | controls_mask(obs)


def fit_control_mask(obs: pd.DataFrame, fraction: float, seed: int, batch_key: str) -> np.ndarray:
    """Seeded split of the controls, per batch: ``fraction`` fit the transforms, the rest are
    held back so that the classifiers compare perturbations with controls the transform never saw.

    The split depends only on the sample ids, the batches and the seed, so every variant
    (``base`` included) holds back the same controls.
    """
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    mask = ctrl.copy()
    if fraction >= 1.0:
        return mask
    keys = obs[batch_key].astype(str).to_numpy() if batch_key in obs else np.zeros(len(obs), str)
    ids = obs.index.astype(str).to_numpy()
    rng = np.random.default_rng(seed)
    for batch in sorted(set(keys[ctrl])):
        rows = np.flatnonzero(ctrl & (keys == batch))
        rows = rows[np.argsort(ids[rows], kind="stable")]
        held = rng.permutation(rows.size)[: rows.size - max(1, int(round(fraction * rows.size)))]
        mask[rows[held]] = False
    return mask


def check_constant(x: np.ndarray, names: list[str], p: TransformParams, source: str) -> np.ndarray:
    """Boolean mask of the features to keep; constant ones are an error unless drop_constant, and
    with ``outlier_cutoff`` features beyond it in robust z-units (:func:`robust_z_max`) are dropped."""
    const = x.std(axis=0) <= 1e-12 * max(1.0, float(np.abs(x).max()))
    if const.any():
        listed = [names[i] for i in np.flatnonzero(const)[:5]]
        if not p.drop_constant:
            raise CellicaError(
                f"{source}: {int(const.sum())} feature(s) are constant on the fit set, e.g. {listed}; "
                "they carry no information and cannot be scaled: set drop_constant: true to drop them (recorded)"
            )
        log.warning("dropping %d constant feature(s), e.g. %s", int(const.sum()), listed)
    keep = ~const
    if p.outlier_cutoff is not None:
        beyond = keep & (robust_z_max(x) > p.outlier_cutoff)
        if beyond.any():
            listed = [names[i] for i in np.flatnonzero(beyond)[:5]]
            log.warning("dropping %d feature(s) beyond %g robust z-units on the fit set, e.g. %s",
                        int(beyond.sum()), p.outlier_cutoff, listed)
        keep &= ~beyond
        if not keep.any():
            raise CellicaError(f"{source}: every feature is beyond outlier_cutoff {p.outlier_cutoff} on the fit set; "
                               "raise it or set it to null")
    return keep


def robust_z_max(x: np.ndarray) -> np.ndarray:
    """Per feature, the largest |x - median| / (1.4826 MAD) over the rows: inf where the MAD is 0
    (over half the rows share one value) but some row differs, 0 where every row is equal."""
    x = np.asarray(x, dtype=np.float64)
    med = np.median(x, axis=0)
    dev = np.abs(x - med)
    mad = 1.4826 * np.median(dev, axis=0)
    worst = dev.max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mad > 0, worst / mad, np.where(worst > 0, np.inf, 0.0))


# ---------------------------------------------------------------------- estimators
def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over a model's arrays (names, dtypes, shapes, bytes): a saved transform whose
    matrices were edited or swapped is refused on load, whatever the zip's own checksums say."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class Transform(BaseEstimator):
    """Base class: the ``base`` variant (identity). Subclasses override ``_fit``, ``_context`` and ``_apply_block``.

    A scikit-learn estimator on AnnData: ``get_params``/``set_params`` (its one parameter,
    the :class:`TransformParams`), ``sklearn.base.clone`` (an unfitted copy), and a step of
    an ``sklearn.pipeline.Pipeline`` (``fit(adata, y=None)``, ``fit_transform(adata, y=None)``).
    """

    variant: ClassVar[str] = "base"
    prefix: ClassVar[str] = ""
    transductive: ClassVar[bool] = False

    def __init__(self, params: TransformParams | None = None):
        self.params = params or TransformParams()
        self.arrays: dict[str, np.ndarray] = {}
        self.info: dict[str, Any] = {}
        self.in_features: list[str] | None = None

    # -- public API
    def fit(self, adata, y=None) -> Transform:
        """Fit on a features AnnData (controls chosen by ``obs.is_control``, split by ``fit_fraction``)."""
        with fixed_threads():
            return self._fit_adata(adata)

    def _fit_adata(self, adata) -> Transform:
        t0 = time.perf_counter()
        # The matrix stays as stored (float32): rows become float64 only where and when used.
        x = adata.X
        self.in_features = list(map(str, adata.var_names))
        obs = adata.obs.copy()
        p = self.params
        obs[FIT_COL] = fit_control_mask(obs, p.fit_fraction, p.seed, p.batch_key)
        self._fitted = (pd.Index(adata.obs_names.astype(str)), obs[FIT_COL].to_numpy())
        self.info["fit_controls"] = int(obs[FIT_COL].sum())
        self.info["held_back_controls"] = int((obs["is_control"] & ~obs[FIT_COL]).sum())
        if p.fit_fraction >= 1.0:
            log.warning("fit_fraction 1.0: every control fits the transform, so the evaluation will reuse them "
                        "(it compares perturbations with the controls the transform was fit on: leakage)")
        if p.standardize == "controls":
            self._fit_standardize(x, obs, self._source(adata))
        self._fit(x, obs, self._source(adata))
        self.info["fit_seconds"] = round(time.perf_counter() - t0, 3)
        self.info["fit_samples"] = int(adata.n_obs)
        return self

    def transform(self, adata):
        """Apply the fitted transform; returns a new AnnData with provenance in ``.uns``."""
        if self.in_features is None:
            raise CellicaError(f"{self.variant}: transform called before fit")
        source = self._source(adata)
        if adata.n_vars != len(self.in_features):
            raise CellicaError(
                f"{source}: has {adata.n_vars} features but the {self.variant} transform was fitted on "
                f"{len(self.in_features)}"
            )
        names = list(map(str, adata.var_names))
        if names != self.in_features:
            raise CellicaError(f"{source}: feature names differ from those the transform was fitted on")
        obs = adata.obs.copy()
        if self._fitted_on(adata):
            obs[FIT_COL] = self._fitted[1]
        elif FIT_COL not in obs:  # new data: its own controls give the per-batch statistics
            obs[FIT_COL] = obs["is_control"].to_numpy(dtype=bool)
        with fixed_threads():
            y = self._apply_all(adata.X, obs, source)
        var = self.out_names(y.shape[1])
        uns = dict(adata.uns)
        uns["transform"] = {"variant": self.variant, "params": asdict(self.params), "diagnostics": self.info,
                            "cellica_version": __version__, "in_features": len(self.in_features)}
        return make_adata(y, obs, var, uns, source)

    def _fitted_on(self, adata) -> bool:
        """Whether ``adata`` holds the very samples this transform was fitted on, in order."""
        fitted = getattr(self, "_fitted", None)
        return fitted is not None and fitted[0].equals(pd.Index(adata.obs_names.astype(str)))

    def _apply_all(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> np.ndarray:
        """The transform of every row, block by block into one float32 matrix (the output contract)."""
        ctx = self._context(x, obs, source)
        blocks = row_blocks(x.shape[0])
        out = None
        for sl in progress(blocks, desc=f"{self.variant}: transform", unit="block") if len(blocks) > 1 else blocks:
            y = self._apply_block(self._rows(x, sl), obs.iloc[sl], ctx)
            if out is None:
                out = np.empty((x.shape[0], y.shape[1]), np.float32)
            out[sl] = y
        return out

    def _rows(self, x: np.ndarray, rows) -> np.ndarray:
        """Rows of the stored matrix (a mask or a slice) as standardised float64: a private copy."""
        return self._standardize(np.array(x[rows], dtype=np.float64))

    def _gather(self, x: np.ndarray, obs: pd.DataFrame, rows: np.ndarray, fn) -> np.ndarray:
        """``fn(block, block_obs)`` on every row block, keeping the ``rows`` (a mask): computed on
        blocks of all rows, not on the selection, so its values are the ones the transform writes."""
        out, at = None, 0
        for sl in row_blocks(x.shape[0]):
            keep = rows[sl]
            if not keep.any():
                continue
            y = fn(self._rows(x, sl), obs.iloc[sl])[keep]
            if out is None:
                out = np.empty((int(rows.sum()), y.shape[1]), y.dtype)
            out[at: at + y.shape[0]] = y
            at += y.shape[0]
        return out

    def fit_transform(self, adata, y=None):
        return self.fit(adata).transform(adata)

    def out_names(self, n: int) -> list[str]:
        if not self.prefix:
            return [self.in_features[i] for i in np.flatnonzero(self.arrays["keep"])] if "keep" in self.arrays else list(self.in_features)
        return [f"{self.prefix}{i + 1}" for i in range(n)]

    # -- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted state to ``.npz`` (arrays + JSON metadata, no pickle)."""
        path = Path(path)
        with atomic_output(path, overwrite=True) as tmp:
            self.write(tmp)
        return path

    def write(self, path: str | os.PathLike) -> None:
        """Write the fitted state to ``path`` as it is (no temporary file; see :meth:`save`)."""
        meta = {"variant": self.variant, "params": asdict(self.params), "info": self.info,
                "in_features": self.in_features, "cellica_version": __version__,
                "arrays_sha256": arrays_digest(self.arrays)}
        with open(path, "wb") as fh:
            np.savez_compressed(fh, __meta__=np.array(json.dumps(meta)), **self.arrays)

    @staticmethod
    def load(path: str | os.PathLike) -> Transform:
        """Load a transform written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise CellicaError(f"transform model {path} does not exist")
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["__meta__"]))
                arrays = {k: data[k] for k in data.files if k != "__meta__"}
        except Exception as exc:  # numpy raises several types for a damaged or foreign file
            raise CellicaError(f"transform model {path} is unreadable ({type(exc).__name__}: {exc})") from None
        recorded = meta.get("arrays_sha256")  # absent in models written before it was recorded
        if recorded is not None and arrays_digest(arrays) != recorded:
            raise CellicaError(f"transform model {path}: its arrays differ from those it was written with "
                               "(edited or damaged); fit it again")
        from cellica.transform.variants import make_transform

        obj = make_transform(meta["variant"], TransformParams(**meta["params"]))
        obj.arrays, obj.info, obj.in_features = arrays, meta["info"], meta["in_features"]
        return obj

    def _fit_standardize(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> None:
        """One global z-score on all fitting controls at once (no per-batch statistics)."""
        ctrl = controls_mask(obs)
        if ctrl.sum() < 2:
            raise CellicaError(f"{source}: standardize: controls needs >= 2 fitting controls, got {int(ctrl.sum())}")
        fit = np.asarray(x[ctrl], dtype=np.float64)
        sd = fit.std(axis=0)
        self.arrays["standardize_mean"] = fit.mean(axis=0)
        self.arrays["standardize_scale"] = 1.0 / np.maximum(sd, 1e-6 * max(float(sd.max()), 1e-30))
        log.info("%s: standardised every feature on all %d fitting controls at once", self.variant, int(ctrl.sum()))

    def _standardize(self, x: np.ndarray) -> np.ndarray:
        if "standardize_mean" not in self.arrays:
            return x
        return (x - self.arrays["standardize_mean"]) * self.arrays["standardize_scale"]

    # -- to override
    def _fit(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> None:
        pass

    def _context(self, x: np.ndarray, obs: pd.DataFrame, source: str):
        """What applying needs from the whole data (e.g. per-batch statistics), computed once."""
        return None

    def _apply_block(self, x: np.ndarray, obs: pd.DataFrame, ctx) -> np.ndarray:
        """The transform of a block of standardised float64 rows."""
        return x

    def _source(self, adata) -> str:
        prov = adata.uns.get("provenance", {}) if hasattr(adata, "uns") else {}
        return f"{self.variant} on {prov.get('table', prov.get('store', 'features'))}"
