"""The comparators' steps: ZCA whitening on the controls (pycytominer's Spherize), and the
transductive corrections Harmony and ComBat (they correct the samples they were fit on).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.transform.steps import Step, controls_mask

log = get_logger("transforms")


class ZCA(Step):
    """ZCA whitening on the controls: ``W = V diag(1/sqrt(l + eps)) V^T`` (pycytominer ``Spherize``)."""

    name = "zca"
    uses = ("sphering_epsilon",)
    owns = ("mean", "w")

    def __init__(self, epsilon: float = 1e-6):
        self.epsilon = epsilon

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(p.sphering_epsilon)

    def fit(self, rows):
        ctrl = controls_mask(rows.obs)
        fit = rows.rows(ctrl)
        mean = fit.mean(axis=0)
        lam, vec = np.linalg.eigh(np.atleast_2d(np.cov(fit - mean, rowvar=False)))
        w = vec @ np.diag(1.0 / np.sqrt(np.maximum(lam, 0) + self.epsilon)) @ vec.T
        self.arrays.update(mean=mean, w=w)
        self.info.update(fit_rows=int(ctrl.sum()), epsilon=self.epsilon)
        return self

    def apply(self, x, obs, ctx):
        return (x - self.arrays["mean"]) @ self.arrays["w"].T


class _Transductive(Step):
    """A correction defined per row of the data it was fit on (it maps no other rows)."""

    transductive = True

    def __init__(self, batch_key: str = "batch"):
        self.batch_key = batch_key

    def _batches(self, rows) -> np.ndarray:
        if rows.obs[self.batch_key].nunique() < 2:
            raise CellicaError(f"{rows.source}: {self.name} needs at least two batches in {self.batch_key!r}")
        return rows.obs[self.batch_key].astype(str).to_numpy()


class Harmonise(_Transductive):
    """Harmony (harmonypy) on its input (the control-PCA scores), batch from ``batch_key``."""

    name = "harmony"
    uses = ("harmony_theta", "harmony_max_iter", "batch_key")
    prefix = "H"

    def __init__(self, batch_key: str = "batch", theta: float = 2.0, max_iter: int = 10, seed: int = 0):
        self.batch_key, self.theta, self.max_iter, self.seed = batch_key, theta, max_iter, seed

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(p.batch_key, p.harmony_theta, p.harmony_max_iter, p.random_seed)

    def fit(self, rows):
        import harmonypy

        scores = rows.all()
        self._batches(rows)
        ho = harmonypy.run_harmony(scores, rows.obs[[self.batch_key]].astype(str), [self.batch_key],
                                   theta=self.theta, max_iter_harmony=self.max_iter, random_state=self.seed,
                                   verbose=False)
        z = np.asarray(ho.Z_corr)
        self.corrected_ = z if z.shape[0] == scores.shape[0] else z.T
        self.info.update(n_components=int(scores.shape[1]), theta=self.theta,
                         iterations=int(len(getattr(ho, "objective_harmony", [])) or self.max_iter))
        return self


class ComBat(_Transductive):
    """ComBat (``scanpy.pp.combat``) on its input, batch from ``batch_key``."""

    name = "combat"
    uses = ("batch_key",)

    @classmethod
    def from_params(cls, p, arg=None):
        return cls(p.batch_key)

    def fit(self, rows):
        import anndata as ad
        import scanpy as sc

        batches = self._batches(rows)
        tmp = ad.AnnData(rows.all(), obs=pd.DataFrame({"b": batches}, index=rows.obs.index.astype(str)))
        self.corrected_ = np.asarray(sc.pp.combat(tmp, key="b", inplace=False))
        return self
