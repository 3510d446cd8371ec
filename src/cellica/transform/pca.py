"""The PCA family: whitening on the fitting controls, then the ICA rotation (fit where
the whitening holds) or a seeded Haar-random rotation (the control for ICA's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform.base import Transform, check_constant, controls_mask, usable_rows
from cellica.transform.ica import canonicalise, fit_rotation, haar_rotation, whiteness_error
from cellica.transform.rows import batch_keys, batch_stats, correct
from cellica.transform.whitening import fit_whitening

log = get_logger("transforms")


WHITE_TOL = 0.05  # largest |cov - I| entry at which a fit set still counts as white


class PCAWhitening(Transform):
    """PCA whitening fit on the controls (or all samples), with per-batch handling."""

    variant = "pca"
    prefix = "PC"

    def _fit(self, x, obs, source):
        p = self.params
        rows = self._fit_rows(obs, source)
        fit = self._rows(x, rows)
        keep = check_constant(fit, self.in_features, p, source)
        self.arrays["keep"] = keep
        fit = self._kept(fit)
        if p.batch_correction is not None and p.batch_stage == "before":
            ctx = self._context(x, obs, source)
            fit = correct(fit, obs[p.batch_key].to_numpy()[rows], ctx, self._scaled)
        w = fit_whitening(fit, p.n_components, p.eig_floor, source, self.variant)
        self.arrays.update(mean=w.mean, components=w.components, scale=w.scale)
        self.info.update(n_components=w.info["n_components"], fit_on=p.fit_on, fit_rows=w.info["fit_rows"],
                         explained_variance_ratio=w.info["explained_variance_ratio"],
                         floored_components=w.info["floored_components"], dropped_constant=int((~keep).sum()),
                         eigenvalues_top=w.info["eigenvalues_top"])
        log.info("%s: PCA whitening on %d %s rows x %d features -> %d components (%.1f%% of variance, %d floored)",
                 self.variant, fit.shape[0], p.fit_on, fit.shape[1], w.info["n_components"],
                 100 * w.info["explained_variance_ratio"], w.info["floored_components"])

    def _fit_rows(self, obs, source) -> np.ndarray:
        if self.params.fit_on == "all":
            return usable_rows(obs)
        ctrl = controls_mask(obs)
        if not ctrl.any():
            raise CellicaError(f"{source}: no control samples (is_control is false everywhere); "
                               "whitening on controls needs them (or set fit_on: all)")
        return ctrl

    @property
    def _scaled(self) -> bool:
        return self.params.batch_correction == "center_scale"

    def _kept(self, x):
        keep = self.arrays["keep"]
        return x if keep.all() else x[:, keep]

    def _context(self, x, obs, source):
        """Per-batch statistics from this data's controls: of the kept features before the
        whitening, or of the whitened ones after it (``batch_stage``)."""
        p = self.params
        if p.batch_correction is None:
            return None
        keys = batch_keys(obs, p.batch_key, source)
        ctrl = controls_mask(obs)
        if p.batch_stage == "before":
            fit = self._kept(self._rows(x, ctrl))
        else:
            fit = self._gather(x, obs, ctrl, lambda xb, ob: self._scores(xb, ob, None) * self.arrays["scale"])
        return batch_stats(fit, keys[ctrl], pd.unique(keys), self._scaled, source)

    def _scores(self, x, obs, ctx):
        """Projections on the kept components, before their scaling."""
        x = self._kept(x)
        if self.params.batch_correction is not None and self.params.batch_stage == "before":
            x = correct(x, obs[self.params.batch_key].to_numpy(), ctx, self._scaled)
        return (x - self.arrays["mean"]) @ self.arrays["components"].T

    def _whiten(self, x, obs, ctx):
        z = self._scores(x, obs, ctx)
        z = z * self.arrays["scale"]
        if self.params.batch_correction is not None and self.params.batch_stage == "after":
            z = correct(z, obs[self.params.batch_key].to_numpy(), ctx, self._scaled)
        return z

    def _apply_block(self, x, obs, ctx):
        return self._whiten(x, obs, ctx)

    def fit_scores(self, x, obs: pd.DataFrame, source: str, standardize: dict[str, np.ndarray] | None = None,
                   in_features: list[str] | None = None) -> np.ndarray:
        """Fit the PCA on ``x`` (rows of ``obs``) and return every row's projection on the kept
        components, batch-handled as the whitening is, before the scaling: the input another
        estimator builds on (Harmony). ``standardize`` are the caller's fitted z-score arrays."""
        self.in_features = in_features
        self.arrays.update(standardize or {})
        self._fit(x, obs, source)
        ctx = self._context(x, obs, source)
        return self._gather(x, obs, np.ones(x.shape[0], bool), lambda xb, ob: self._scores(xb, ob, ctx))


class PCAICA(PCAWhitening):
    """PCA whitening, then the ICA rotation, fit where the whitening holds."""

    variant = "pca_ica"
    prefix = "IC"

    def _fit(self, x, obs, source):
        super()._fit(x, obs, source)
        p = self.params
        rows = controls_mask(obs) if p.ica_fit_on == "controls" else usable_rows(obs)
        if not rows.any():
            raise CellicaError(f"{source}: ICA on controls, but there are none")
        ctx = self._context(x, obs, source)
        fit = self._gather(x, obs, rows, lambda xb, ob: self._whiten(xb, ob, ctx))
        if p.ica_max_samples and fit.shape[0] > p.ica_max_samples:
            pick = np.random.default_rng(p.random_seed).choice(fit.shape[0], p.ica_max_samples, replace=False)
            fit = fit[np.sort(pick)]
        # ICA needs centred, white input: re-whiten the fit set when the PCA whitening does not hold on it.
        fit -= fit.mean(axis=0)
        err = whiteness_error(fit)
        pre = np.eye(fit.shape[1])
        if err > WHITE_TOL:
            lam, vec = np.linalg.eigh(np.cov(fit, rowvar=False))
            pre = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 1e-12 * lam.max()))) @ vec.T
            log.warning("ICA fit set (%s, %d rows) is not white (max |cov - I| = %.2f): re-whitened it first",
                        p.ica_fit_on, fit.shape[0], err)
            fit = fit @ pre.T
        result = fit_rotation(fit.astype(np.float32), p.ica, seed=p.random_seed)
        rot, canon = canonicalise(result.rotation, fit)
        self.arrays["unmixing"] = rot @ pre
        self.info["ica"] = {**result.diagnostics, "fit_on": p.ica_fit_on, "fit_rows": int(fit.shape[0]),
                            "whiteness_error_before": err, "rewhitened": bool(err > WHITE_TOL),
                            "negentropy": canon["negentropy"][:20], "converged": bool(result.diagnostics["converged"])}

    def _apply_block(self, x, obs, ctx):
        return self._whiten(x, obs, ctx) @ self.arrays["unmixing"].T


class PCARandom(PCAWhitening):
    """PCA whitening, then a seeded Haar-random rotation."""

    variant = "pca_rand"
    prefix = "RC"

    def _fit(self, x, obs, source):
        super()._fit(x, obs, source)
        self.arrays["rotation"] = haar_rotation(len(self.arrays["scale"]), self.params.random_seed)
        self.info["rotation_seed"] = self.params.random_seed

    def _apply_block(self, x, obs, ctx):
        return self._whiten(x, obs, ctx) @ self.arrays["rotation"].T
