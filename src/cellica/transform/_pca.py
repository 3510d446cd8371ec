"""The PCA family's steps: PCA whitening fit on the fitting controls, then the ICA rotation
(fit where the whitening holds) or a seeded Haar-random rotation (the control for ICA's).
"""

from __future__ import annotations

import numpy as np

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform.ica import canonicalise, fit_rotation, haar_rotation, whiteness_error
from cellica.transform.params import IcaParams
from cellica.transform.steps import Step, controls_mask, fit_rows, usable_rows
from cellica.transform.whitening import fit_whitening

log = get_logger("transforms")


WHITE_TOL = 0.05  # largest |cov - I| entry at which a fit set still counts as white


class PCA(Step):
    """PCA on the fit rows (``fit_on``): the projections on the kept components, each scaled to
    unit variance (``whiten``, the ``pca`` variant) or not (the scores Harmony corrects)."""

    name = "pca"
    uses = ("fit_on", "n_components", "eig_floor")
    owns = ("mean", "components", "scale")
    prefix = "PC"

    def __init__(self, whiten: bool = True, fit_on: str = "controls", n_components: float | None = None,
                 eig_floor: float = 1e-6):
        self.whiten, self.fit_on, self.n_components, self.eig_floor = whiten, fit_on, n_components, eig_floor

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(arg != "scores", p.fit_on, p.n_components, p.eig_floor)

    def fit(self, rows):
        fit = rows.rows(fit_rows(rows.obs, self.fit_on, rows.source))
        w = fit_whitening(fit, self.n_components, self.eig_floor, rows.source, rows.source)
        self.arrays.update(mean=w.mean, components=w.components, scale=w.scale)
        self.info.update(n_components=w.info["n_components"], fit_on=self.fit_on, fit_rows=w.info["fit_rows"],
                         explained_variance_ratio=w.info["explained_variance_ratio"],
                         floored_components=w.info["floored_components"], eigenvalues_top=w.info["eigenvalues_top"])
        log.info("%s: PCA on %d %s rows x %d features -> %d components (%.1f%% of variance, %d floored)",
                 rows.source, fit.shape[0], self.fit_on, fit.shape[1], w.info["n_components"],
                 100 * w.info["explained_variance_ratio"], w.info["floored_components"])
        return self

    def out_names(self, names):
        return [f"{self.prefix}{i + 1}" for i in range(len(self.arrays["scale"]))]

    def apply(self, x, obs, ctx):
        z = (x - self.arrays["mean"]) @ self.arrays["components"].T
        return z * self.arrays["scale"] if self.whiten else z


class ICARotation(Step):
    """The ICA rotation of whitened rows, fit on the fitting controls (``fit_on: controls``,
    where the whitening holds) or every usable row (re-whitened first, and logged)."""

    name = "ica"
    uses = ("ica_backend", "ica_fit_on", "ica_max_samples", "ica_max_iter", "ica_tol", "ica_device")
    owns = ("unmixing",)
    prefix = "IC"

    def __init__(self, fit_on: str = "controls", ica: IcaParams | None = None, seed: int = 0):
        self.fit_on, self.ica, self.seed = fit_on, ica, seed

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(p.ica_fit_on, p.ica, p.random_seed)

    def fit(self, rows):
        mask = controls_mask(rows.obs) if self.fit_on == "controls" else usable_rows(rows.obs)
        if not mask.any():
            raise CellicaError(f"{rows.source}: ICA on controls, but there are none")
        fit = rows.rows(mask)
        ica = self.ica or IcaParams()
        if ica.max_samples and fit.shape[0] > ica.max_samples:
            pick = np.random.default_rng(self.seed).choice(fit.shape[0], ica.max_samples, replace=False)
            fit = fit[np.sort(pick)]
        # ICA needs centred, white input: re-whiten the fit set when the PCA whitening does not hold on it.
        fit -= fit.mean(axis=0)
        err = whiteness_error(fit)
        pre = np.eye(fit.shape[1])
        if err > WHITE_TOL:
            lam, vec = np.linalg.eigh(np.cov(fit, rowvar=False))
            pre = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 1e-12 * lam.max()))) @ vec.T
            log.warning("ICA fit set (%s, %d rows) is not white (max |cov - I| = %.2f): re-whitened it first",
                        self.fit_on, fit.shape[0], err)
            fit = fit @ pre.T
        result = fit_rotation(fit.astype(np.float32), ica, seed=self.seed)
        rot, canon = canonicalise(result.rotation, fit)
        self.arrays["unmixing"] = rot @ pre
        self.info["ica"] = {**result.diagnostics, "fit_on": self.fit_on, "fit_rows": int(fit.shape[0]),
                            "whiteness_error_before": err, "rewhitened": bool(err > WHITE_TOL),
                            "negentropy": canon["negentropy"][:20], "converged": bool(result.diagnostics["converged"])}
        return self

    def apply(self, x, obs, ctx):
        return x @ self.arrays["unmixing"].T


class RandomRotation(Step):
    """A seeded Haar-random rotation: the control showing that ICA's rotation matters."""

    name = "random_rotation"
    owns = ("rotation",)
    prefix = "RC"

    def __init__(self, seed: int = 0):
        self.seed = seed

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(p.random_seed)

    def fit(self, rows):
        self.arrays["rotation"] = haar_rotation(rows.n_features, self.seed)
        self.info["rotation_seed"] = self.seed
        return self

    def apply(self, x, obs, ctx):
        return x @ self.arrays["rotation"].T
