"""The comparators: ZCA whitening on the controls (pycytominer's Spherize), and the
transductive corrections Harmony and ComBat (they correct the samples they were fit on).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform.base import Transform, check_constant, controls_mask
from cellica.transform.pca import PCAWhitening

log = get_logger("transforms")


class Sphering(Transform):
    """ZCA whitening on the controls: ``W = V diag(1/sqrt(l + eps)) V^T`` (pycytominer ``Spherize``)."""

    variant = "sphering"

    def _fit(self, x, obs, source):
        p = self.params
        rows = controls_mask(obs)
        if not rows.any():
            raise CellicaError(f"{source}: no control samples to fit sphering on")
        fit = self._rows(x, rows)
        keep = check_constant(fit, self.in_features, p, source)
        fit = fit[:, keep]
        mean = fit.mean(axis=0)
        lam, vec = np.linalg.eigh(np.atleast_2d(np.cov(fit - mean, rowvar=False)))
        w = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 0) + p.sphering_epsilon)) @ vec.T
        self.arrays.update(keep=keep, mean=mean, w=w)
        self.info.update(fit_rows=int(rows.sum()), epsilon=p.sphering_epsilon, dropped_constant=int((~keep).sum()))

    def _apply_block(self, x, obs, ctx):
        return (x[:, self.arrays["keep"]] - self.arrays["mean"]) @ self.arrays["w"].T


class _Transductive(Transform):
    """Corrections defined per sample of the fitted data (they cannot map new samples)."""

    transductive = True

    def transform(self, adata):
        if not self._fitted_on(adata):
            raise CellicaError(
                f"{self.variant} corrects the samples it was fitted on and cannot be applied to other "
                "samples; refit it on the combined data"
            )
        return super().transform(adata)

    def _apply_all(self, x, obs, source):
        return self._corrected


class Harmony(_Transductive):
    """Harmony on the control-PCA scores (harmonypy), batch from ``batch_key``."""

    variant = "harmony"
    prefix = "H"

    def _fit(self, x, obs, source):
        import harmonypy

        p = self.params
        standardize = {k: v for k, v in self.arrays.items() if k.startswith("standardize_")}
        scores = PCAWhitening(p).fit_scores(x, obs, source, standardize, self.in_features)
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
        x = self._rows(x, slice(None))  # ComBat corrects the whole matrix at once
        keep = check_constant(x, self.in_features, p, source)
        tmp = ad.AnnData(x[:, keep], obs=pd.DataFrame({"b": obs[p.batch_key].astype(str).to_numpy()},
                                                                          index=obs.index.astype(str)))
        self._corrected = np.asarray(sc.pp.combat(tmp, key="b", inplace=False))
        self.arrays["keep"] = keep
