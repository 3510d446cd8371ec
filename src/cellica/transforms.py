"""Feature transforms: PCA whitening on controls, ICA, a random rotation, and comparators.

Each variant is a scikit-learn-style estimator on AnnData: ``fit`` on one
features file, ``transform`` any other with the same features, ``save``/``load``
to a small ``.npz`` (arrays plus JSON; never pickle).

=========  ==================================================================
variant    what it does
=========  ==================================================================
base       the features unchanged (the reference row of every table)
pca        PCA whitening fit on the controls (centred on them), eigenvalue floor
pca_ica    pca, then the ICA rotation (fit where the whitening holds)
pca_rand   pca, then a seeded Haar-random rotation (the control for ICA)
sphering   ZCA whitening on the controls (pycytominer / JUMP recipe)
harmony    Harmony (harmonypy) on the control-PCA scores; transductive
combat     ComBat (scanpy) on the features; transductive
=========  ==================================================================

Batches (``batch_key``) are handled in the PCA family by ``batch_correction``:
``none`` (one global fit), ``center`` (subtract each batch's control mean) or
``center_scale`` (also divide by each batch's control standard deviation), at
``batch_stage`` ``before`` the whitening (on the raw features) or ``after`` it (the
"TVN" practice). Per-batch statistics always come from the controls of the data
being transformed, so a new plate is corrected by its own controls. The default,
``center``, removes additive batch offsets while keeping a single global linear
map, which is what the identifiability argument (whitening leaves a rotation,
ICA picks it) needs; centring commutes with the linear map, so its stage does
not matter.
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

from cellica import __version__
from cellica.adata import make_adata
from cellica.atomic import atomic_output
from cellica.contracts import FIT_COL
from cellica.errors import CellicaError
from cellica.ica import canonicalise, fit_rotation, haar_rotation, whiteness_error
from cellica.logs import get_logger
from cellica.params import TransformParams
from cellica.threads import fixed_threads

log = get_logger("transforms")

VARIANTS = ("base", "pca", "pca_ica", "pca_rand", "sphering", "harmony", "combat")
WHITE_TOL = 0.05  # largest |cov - I| entry at which a fit set still counts as white


# ---------------------------------------------------------------------- helpers


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


def batch_stats(x: np.ndarray, obs: pd.DataFrame, key: str, scale: bool, source: str) -> dict[str, tuple]:
    """Per-batch (mean, std) of the controls; every batch must have controls."""
    if key not in obs.columns:
        raise CellicaError(f"{source}: batch_key {key!r} is not a metadata column")
    ctrl = controls_mask(obs)
    stats = {}
    for batch in pd.unique(obs[key]):
        rows = (obs[key] == batch).to_numpy() & ctrl
        if not rows.any():
            raise CellicaError(
                f"{source}: batch {batch!r} has no control samples, but per-batch correction "
                "uses each batch's controls; set batch_correction: none or add controls"
            )
        mean = x[rows].mean(axis=0)
        std = x[rows].std(axis=0) if scale else None
        if scale and rows.sum() < 2:
            raise CellicaError(f"{source}: batch {batch!r} has one control sample; center_scale needs >= 2")
        stats[batch] = (mean, std)
    return stats


def apply_batch_correction(x: np.ndarray, obs: pd.DataFrame, p: TransformParams, source: str) -> np.ndarray:
    """Centre (and scale) each batch on its own controls."""
    if p.batch_correction == "none":
        return x
    scale = p.batch_correction == "center_scale"
    out = np.empty_like(x)
    keys = obs[p.batch_key].to_numpy()
    for batch, (mean, std) in batch_stats(x, obs, p.batch_key, scale, source).items():
        rows = keys == batch
        out[rows] = x[rows] - mean
        if scale:
            out[rows] /= np.maximum(std, 1e-6 * max(float(std.max()), 1e-30))
    return out


def check_constant(x: np.ndarray, names: list[str], p: TransformParams, source: str) -> np.ndarray:
    """Boolean mask of the features to keep; constant ones are an error unless drop_constant."""
    const = x.std(axis=0) <= 1e-12 * max(1.0, float(np.abs(x).max()))
    if const.any():
        listed = [names[i] for i in np.flatnonzero(const)[:5]]
        if not p.drop_constant:
            raise CellicaError(
                f"{source}: {int(const.sum())} feature(s) are constant on the fit set, e.g. {listed}; "
                "they carry no information and cannot be scaled: set drop_constant: true to drop them (recorded)"
            )
        log.warning("dropping %d constant feature(s), e.g. %s", int(const.sum()), listed)
    return ~const


# ---------------------------------------------------------------------- estimators
class Transform:
    """Base class: the ``base`` variant (identity). Subclasses override ``_fit``/``_apply``."""

    variant: ClassVar[str] = "base"
    prefix: ClassVar[str] = ""
    transductive: ClassVar[bool] = False
    seeded: ClassVar[bool] = False  # its result depends on TransformParams.random_seed

    def __init__(self, params: TransformParams | None = None):
        self.params = params or TransformParams()
        self.arrays: dict[str, np.ndarray] = {}
        self.info: dict[str, Any] = {}
        self.in_features: list[str] | None = None

    # -- public API
    def fit(self, adata) -> Transform:
        """Fit on a features AnnData (controls chosen by ``obs.is_control``, split by ``fit_fraction``)."""
        with fixed_threads():
            return self._fit_adata(adata)

    def _fit_adata(self, adata) -> Transform:
        t0 = time.perf_counter()
        x = np.asarray(adata.X, dtype=np.float64)
        self.in_features = list(map(str, adata.var_names))
        obs = adata.obs.copy()
        p = self.params
        obs[FIT_COL] = fit_control_mask(obs, p.fit_fraction, p.seed, p.batch_key)
        self._fitted = (list(map(str, adata.obs_names)), obs[FIT_COL].to_numpy())
        self.info["fit_controls"] = int(obs[FIT_COL].sum())
        self.info["held_back_controls"] = int((obs["is_control"] & ~obs[FIT_COL]).sum())
        if p.fit_fraction >= 1.0:
            log.warning("fit_fraction 1.0: every control fits the transform, so the evaluation will reuse them "
                        "(it compares perturbations with the controls the transform was fit on: leakage)")
        if p.standardize == "controls":
            self._fit_standardize(x, obs, self._source(adata))
        self._fit(self._standardize(x), obs, self._source(adata))
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
        fitted = getattr(self, "_fitted", None)
        if fitted is not None and fitted[0] == list(map(str, adata.obs_names)):
            obs[FIT_COL] = fitted[1]
        elif FIT_COL not in obs:  # new data: its own controls give the per-batch statistics
            obs[FIT_COL] = obs["is_control"].to_numpy(dtype=bool)
        with fixed_threads():
            y = self._apply(self._standardize(np.asarray(adata.X, dtype=np.float64)), obs, source)
        var = self.out_names(y.shape[1])
        uns = dict(adata.uns)
        uns["transform"] = {"variant": self.variant, "params": asdict(self.params), "diagnostics": self.info,
                            "cellica_version": __version__, "in_features": len(self.in_features)}
        return make_adata(y, obs, var, uns, source)

    def fit_transform(self, adata):
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
                "in_features": self.in_features, "cellica_version": __version__}
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
        obj = make_transform(meta["variant"], TransformParams(**meta["params"]))
        obj.arrays, obj.info, obj.in_features = arrays, meta["info"], meta["in_features"]
        return obj

    def _fit_standardize(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> None:
        """One global z-score on all fitting controls at once (no per-batch statistics)."""
        ctrl = controls_mask(obs)
        if ctrl.sum() < 2:
            raise CellicaError(f"{source}: standardize: controls needs >= 2 fitting controls, got {int(ctrl.sum())}")
        sd = x[ctrl].std(axis=0)
        self.arrays["standardize_mean"] = x[ctrl].mean(axis=0)
        self.arrays["standardize_scale"] = 1.0 / np.maximum(sd, 1e-6 * max(float(sd.max()), 1e-30))
        log.info("%s: standardised every feature on all %d fitting controls at once", self.variant, int(ctrl.sum()))

    def _standardize(self, x: np.ndarray) -> np.ndarray:
        if "standardize_mean" not in self.arrays:
            return x
        return (x - self.arrays["standardize_mean"]) * self.arrays["standardize_scale"]

    # -- to override
    def _fit(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> None:
        pass

    def _apply(self, x: np.ndarray, obs: pd.DataFrame, source: str) -> np.ndarray:
        return x

    def _source(self, adata) -> str:
        prov = adata.uns.get("provenance", {}) if hasattr(adata, "uns") else {}
        return f"{self.variant} on {prov.get('table', prov.get('store', 'features'))}"


class PCAWhitening(Transform):
    """PCA whitening fit on the controls (or all samples), with per-batch handling."""

    variant = "pca"
    prefix = "PC"

    def _fit(self, x, obs, source):
        p = self.params
        keep = check_constant(x[self._fit_rows(obs, source)], self.in_features, p, source)
        self.arrays["keep"] = keep
        x = self._pre(x[:, keep], obs, source)
        fit = x[self._fit_rows(obs, source)]
        n, d = fit.shape
        mean = fit.mean(axis=0)
        cov = np.cov(fit - mean, rowvar=False).reshape(d, d)
        eigval, eigvec = np.linalg.eigh(cov)
        order = np.argsort(eigval)[::-1]
        eigval, eigvec = eigval[order], eigvec[:, order]
        k = self._n_components(eigval, n, d, source)
        floor = p.eig_floor * max(float(eigval[0]), 1e-30)
        lam = np.maximum(eigval[:k], floor)
        self.arrays.update(mean=mean, components=eigvec[:, :k].T, scale=1.0 / np.sqrt(lam))
        self.info.update(
            n_components=int(k), fit_on=p.fit_on, fit_rows=int(n),
            explained_variance_ratio=float(eigval[:k].sum() / max(eigval.sum(), 1e-30)),
            floored_components=int((eigval[:k] < floor).sum()), dropped_constant=int((~keep).sum()),
            eigenvalues_top=eigval[: min(k, 10)].tolist(),
        )
        log.info("%s: PCA whitening on %d %s rows x %d features -> %d components (%.1f%% of variance, %d floored)",
                 self.variant, n, p.fit_on, d, k, 100 * self.info["explained_variance_ratio"],
                 self.info["floored_components"])

    def _fit_rows(self, obs, source) -> np.ndarray:
        if self.params.fit_on == "all":
            return usable_rows(obs)
        ctrl = controls_mask(obs)
        if not ctrl.any():
            raise CellicaError(f"{source}: no control samples (is_control is false everywhere); "
                               "whitening on controls needs them (or set fit_on: all)")
        return ctrl

    def _n_components(self, eigval, n, d, source) -> int:
        nc = self.params.n_components
        rank_limit = min(d, n - 1)
        if nc is None:
            if n - 1 < d:
                raise CellicaError(
                    f"{source}: {n} control rows for {d} features: whitening impossible (the covariance "
                    f"has rank <= {n - 1}); set n_components to at most {n - 1} (e.g. {max(1, min(d, (n - 1) // 2))})"
                )
            # Directions with (numerically) no variance carry nothing and would not be white: drop them.
            k = int((eigval > self.params.eig_floor * max(float(eigval[0]), 1e-30)).sum())
            if k < d:
                log.warning("%s: %d of %d directions have no variance on the fit set (eigenvalue <= %.0e x the "
                            "largest); keeping %d components", self.variant, d - k, d, self.params.eig_floor, k)
            return k
        if nc >= 1:
            k = int(nc)
            if k > rank_limit:
                raise CellicaError(f"{source}: n_components {k} exceeds what {n} fit rows x {d} features allow "
                                   f"({rank_limit}); lower it")
            return k
        frac = np.cumsum(eigval) / max(eigval.sum(), 1e-30)
        return int(min(np.searchsorted(frac, nc) + 1, rank_limit))

    def _pre(self, x, obs, source):
        p = self.params
        return apply_batch_correction(x, obs, p, source) if p.batch_stage == "before" else x

    def _whiten(self, x, obs, source):
        keep = self.arrays["keep"]
        z = (self._pre(x[:, keep], obs, source) - self.arrays["mean"]) @ self.arrays["components"].T
        z = z * self.arrays["scale"]
        if self.params.batch_stage == "after":
            z = apply_batch_correction(z, obs, self.params, source)
        return z

    def _apply(self, x, obs, source):
        return self._whiten(x, obs, source)


class PCAICA(PCAWhitening):
    """PCA whitening, then the ICA rotation, fit where the whitening holds."""

    variant = "pca_ica"
    seeded = True
    prefix = "IC"

    def _fit(self, x, obs, source):
        super()._fit(x, obs, source)
        p = self.params
        z = self._whiten(x, obs, source)
        rows = controls_mask(obs) if p.ica_fit_on == "controls" else usable_rows(obs)
        if not rows.any():
            raise CellicaError(f"{source}: ICA on controls, but there are none")
        fit = z[rows]
        if p.ica_max_samples and fit.shape[0] > p.ica_max_samples:
            pick = np.random.default_rng(p.random_seed).choice(fit.shape[0], p.ica_max_samples, replace=False)
            fit = fit[np.sort(pick)]
        # ICA needs centred, white input: re-whiten the fit set when the PCA whitening does not hold on it.
        fit = fit - fit.mean(axis=0)
        err = whiteness_error(fit)
        pre = np.eye(fit.shape[1])
        if err > WHITE_TOL:
            lam, vec = np.linalg.eigh(np.cov(fit, rowvar=False))
            pre = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 1e-12 * lam.max()))) @ vec.T
            log.warning("ICA fit set (%s, %d rows) is not white (max |cov - I| = %.2f): re-whitened it first",
                        p.ica_fit_on, fit.shape[0], err)
            fit = fit @ pre.T
        result = fit_rotation(fit.astype(np.float32), backend=p.ica_backend, max_iter=p.ica_max_iter,
                              tol=p.ica_tol, seed=p.random_seed, device=p.ica_device)
        rot, canon = canonicalise(result.rotation, fit)
        self.arrays["unmixing"] = rot @ pre
        self.info["ica"] = {**result.diagnostics, "fit_on": p.ica_fit_on, "fit_rows": int(fit.shape[0]),
                            "whiteness_error_before": err, "rewhitened": bool(err > WHITE_TOL),
                            "negentropy": canon["negentropy"][:20], "converged": bool(result.diagnostics["converged"])}

    def _apply(self, x, obs, source):
        return self._whiten(x, obs, source) @ self.arrays["unmixing"].T


class PCARandom(PCAWhitening):
    """PCA whitening, then a seeded Haar-random rotation."""

    variant = "pca_rand"
    seeded = True
    prefix = "RC"

    def _fit(self, x, obs, source):
        super()._fit(x, obs, source)
        self.arrays["rotation"] = haar_rotation(len(self.arrays["scale"]), self.params.random_seed)
        self.info["rotation_seed"] = self.params.random_seed

    def _apply(self, x, obs, source):
        return self._whiten(x, obs, source) @ self.arrays["rotation"].T


class Sphering(Transform):
    """ZCA whitening on the controls: ``W = V diag(1/sqrt(l + eps)) V^T`` (pycytominer ``Spherize``)."""

    variant = "sphering"

    def _fit(self, x, obs, source):
        p = self.params
        rows = controls_mask(obs)
        if not rows.any():
            raise CellicaError(f"{source}: no control samples to fit sphering on")
        keep = check_constant(x[rows], self.in_features, p, source)
        fit = x[rows][:, keep]
        mean = fit.mean(axis=0)
        lam, vec = np.linalg.eigh(np.atleast_2d(np.cov(fit - mean, rowvar=False)))
        w = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 0) + p.sphering_epsilon)) @ vec.T
        self.arrays.update(keep=keep, mean=mean, w=w)
        self.info.update(fit_rows=int(rows.sum()), epsilon=p.sphering_epsilon, dropped_constant=int((~keep).sum()))

    def _apply(self, x, obs, source):
        return (x[:, self.arrays["keep"]] - self.arrays["mean"]) @ self.arrays["w"].T


class _Transductive(Transform):
    """Corrections defined per sample of the fitted data (they cannot map new samples)."""

    transductive = True

    def transform(self, adata):
        fitted = getattr(self, "_fitted", None)
        if fitted is None or fitted[0] != list(map(str, adata.obs_names)):
            raise CellicaError(
                f"{self.variant} corrects the samples it was fitted on and cannot be applied to other "
                "samples; refit it on the combined data"
            )
        return super().transform(adata)

    def _apply(self, x, obs, source):
        return self._corrected


class Harmony(_Transductive):
    """Harmony on the control-PCA scores (harmonypy), batch from ``batch_key``."""

    variant = "harmony"
    seeded = True
    prefix = "H"

    def _fit(self, x, obs, source):
        import harmonypy

        p = self.params
        pca = PCAWhitening(p)
        pca.in_features = self.in_features
        pca._fit(x, obs, source)
        scores = (pca._pre(x[:, pca.arrays["keep"]], obs, source) - pca.arrays["mean"]) @ pca.arrays["components"].T
        if obs[p.batch_key].nunique() < 2:
            raise CellicaError(f"{source}: harmony needs at least two batches in {p.batch_key!r}")
        ho = harmonypy.run_harmony(scores, obs[[p.batch_key]].astype(str), [p.batch_key], theta=p.harmony_theta,
                                   max_iter_harmony=p.harmony_max_iter, random_state=p.random_seed, verbose=False)
        z = np.asarray(ho.Z_corr)
        self._corrected = z if z.shape[0] == x.shape[0] else z.T
        self.info.update(n_components=int(scores.shape[1]), theta=p.harmony_theta,
                         iterations=int(len(getattr(ho, "objective_harmony", [])) or p.harmony_max_iter))


class Combat(_Transductive):
    """ComBat (scanpy.pp.combat) on the features, batch from ``batch_key``."""

    variant = "combat"

    def _fit(self, x, obs, source):
        import anndata as ad
        import scanpy as sc

        p = self.params
        if obs[p.batch_key].nunique() < 2:
            raise CellicaError(f"{source}: combat needs at least two batches in {p.batch_key!r}")
        keep = check_constant(x, self.in_features, p, source)
        tmp = ad.AnnData(x[:, keep].astype(np.float64), obs=pd.DataFrame({"b": obs[p.batch_key].astype(str).to_numpy()},
                                                                          index=obs.index.astype(str)))
        self._corrected = np.asarray(sc.pp.combat(tmp, key="b", inplace=False))
        self.arrays["keep"] = keep


_CLASSES = {cls.variant: cls for cls in (Transform, PCAWhitening, PCAICA, PCARandom, Sphering, Harmony, Combat)}


def seeded_variants() -> list[str]:
    """Variants whose result depends on the random seed (re-fit per evaluation seed)."""
    return [v for v, cls in _CLASSES.items() if cls.seeded]


def make_transform(variant: str, params: TransformParams | None = None) -> Transform:
    """The estimator for a variant name."""
    if variant not in _CLASSES:
        raise CellicaError(f"unknown transform variant {variant!r}; choose from {list(VARIANTS)}")
    p = params or TransformParams()
    p.validate()
    return _CLASSES[variant](p)
