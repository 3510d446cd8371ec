"""A transform: which controls fit it (a seeded split per batch), and :class:`Transform`,
a variant's composition of steps (:mod:`cellica.transform.steps`) as one estimator on
AnnData that saves to a small ``.npz`` (the steps' arrays plus JSON; never pickle).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from cellica import __version__
from cellica.core.adata import make_adata
from cellica.core.atomic import atomic_output
from cellica.core.contracts import FIT_COL
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.core.scales import moments, spread_orders
from cellica.core.threads import fixed_threads
from cellica.registry import REFERENCE_VARIANT
from cellica.transform._rows import row_blocks
from cellica.transform.params import TransformParams
from cellica.transform.steps import Rows, controls_mask

log = get_logger("transforms")
# Steps whose result depends on the features' relative units (they mix features), and the
# spread of the controls' standard deviations (orders of magnitude) above which they warn
# when nothing puts every feature on its own scale first.
MIXING_STEPS = ("pca", "zca")
UNIT_WARN_ORDERS = 3.0


def fit_control_mask(obs: pd.DataFrame, fraction: float, seed: int, batch_key: str) -> np.ndarray:
    """Seeded split of the controls, per batch: ``fraction`` fit the transforms, the rest are
    held back so that the classifiers compare perturbations with controls the transform never saw.

    The split depends only on the sample ids, which samples share a batch, and the seed: not
    on the rows' order, nor on the batches' names (each batch's controls are drawn in id order,
    the batches taken in the order of their first id), so every variant (``base`` included)
    holds back the same controls, and renaming batches leaves it as it was.
    """
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    mask = ctrl.copy()
    if fraction >= 1.0:
        return mask
    keys = obs[batch_key].astype(str).to_numpy() if batch_key in obs else np.zeros(len(obs), str)
    ids = obs.index.astype(str).to_numpy()
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(ctrl & (keys == batch)) for batch in set(keys[ctrl])]
    groups = [rows[np.argsort(ids[rows], kind="stable")] for rows in groups]
    for rows in sorted(groups, key=lambda rows: ids[rows[0]]):
        held = rng.permutation(rows.size)[: rows.size - max(1, int(round(fraction * rows.size)))]
        mask[rows[held]] = False
    return mask


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
    """A transform variant: the named composition of steps the registry gives ``variant``
    (:func:`cellica.transform.variants.compose`), fit on one features AnnData and applied to
    any with the same features.

    A scikit-learn estimator on AnnData: ``get_params``/``set_params`` (the variant and its
    :class:`TransformParams`), ``sklearn.base.clone`` (an unfitted copy), and a step of an
    ``sklearn.pipeline.Pipeline`` (``fit(adata, y=None)``, ``fit_transform(adata, y=None)``).
    After ``fit``, ``steps`` holds the fitted steps and ``named_steps`` them by name.

    Parameters
    ----------
    variant
        A registered variant name (:data:`cellica.registry.VARIANTS`).
    params
        The transform stage's parameters; each step reads those it uses.
    """

    def __init__(self, variant: str = REFERENCE_VARIANT, params: TransformParams | None = None):
        self.variant = variant
        self.params = params or TransformParams()
        self.steps: list = []
        self.info: dict[str, Any] = {}
        self.in_features: list[str] | None = None

    @property
    def named_steps(self) -> dict[str, Any]:
        """The steps by their registry names."""
        return {step.name: step for step in self.steps}

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Every step's fitted arrays, by the names they are saved under."""
        return {k: v for step in self.steps for k, v in step.arrays.items()}

    @property
    def transductive(self) -> bool:
        """Whether the last step corrects only the rows it was fit on (Harmony, ComBat)."""
        return bool(self.steps) and self.steps[-1].transductive

    # -- public API
    def fit(self, adata, y=None) -> Transform:
        """Fit every step in turn on a features AnnData (controls from ``obs.is_control``, split
        by ``fit_fraction``), each on the rows through the steps before it."""
        from cellica.transform.variants import compose

        with fixed_threads():
            t0 = time.perf_counter()
            self.in_features = list(map(str, adata.var_names))
            obs = adata.obs.copy()
            p = self.params
            obs[FIT_COL] = fit_control_mask(obs, p.fit_fraction, p.seed, p.batch_key)
            self.info = {"fit_controls": int(obs[FIT_COL].sum()),
                         "held_back_controls": int((obs["is_control"] & ~obs[FIT_COL]).sum())}
            if p.fit_fraction >= 1.0:
                log.warning("fit_fraction 1.0: every control fits the transform, so the evaluation will reuse them "
                            "(it compares perturbations with the controls the transform was fit on: leakage)")
            self.steps = compose(self.variant, p)
            # The matrix stays as stored (float32): rows become float64 only where and when used.
            rows = Rows(adata.X, obs, self._source(adata), self.in_features)
            self._check_units(rows)
            for step in self.steps:
                step.fit(rows)
                rows = rows.then(step, step.context(rows))
                self.info.update(step.info)
            self._fitted = (pd.Index(adata.obs_names.astype(str)), obs[FIT_COL].to_numpy(), rows.contexts)
            self.info["fit_seconds"] = round(time.perf_counter() - t0, 3)
            self.info["fit_samples"] = int(adata.n_obs)
        return self

    def _check_units(self, rows: Rows) -> None:
        """Record how many orders of magnitude the fitting controls' standard deviations span,
        and warn when a feature-mixing step (PCA, ZCA) would see such mixed units unscaled."""
        ctrl = controls_mask(rows.obs)
        if not ctrl.any():
            return
        mean, sd = moments(rows.rows(ctrl))
        orders = spread_orders(sd, mean)
        self.info["feature_sd_orders"] = round(orders, 2)
        # what puts each feature on its own scale before the mixing: the global z-score, or this
        # variant's own per-batch scaling before the whitening (sphering and ComBat have none)
        scaled = any(s.name == "standardize" for s in self.steps) or (
            self.params.batch_stage == "before" and any(s.name == "centre_batches" and s.scale for s in self.steps))
        if orders > UNIT_WARN_ORDERS and not scaled and any(s.name in MIXING_STEPS for s in self.steps):
            log.warning("%s: the features' control standard deviations span %.1f orders of magnitude (mixed units, "
                        "e.g. CellProfiler profiles) and nothing scales them first: the %s step will be dominated by "
                        "the largest units; set transform.standardize: controls (or batch_correction: center_scale)",
                        rows.source, orders, self.variant)

    def transform(self, adata):
        """Apply the fitted steps; returns a new AnnData with provenance in ``.uns``."""
        if self.in_features is None:
            raise CellicaError(f"{self.variant}: transform called before fit")
        source = self._source(adata)
        if adata.n_vars != len(self.in_features):
            raise CellicaError(
                f"{source}: has {adata.n_vars} features but the {self.variant} transform was fitted on "
                f"{len(self.in_features)}"
            )
        if list(map(str, adata.var_names)) != self.in_features:
            raise CellicaError(f"{source}: feature names differ from those the transform was fitted on")
        fitted_on = self._fitted_on(adata)
        if self.transductive and not fitted_on:
            raise CellicaError(
                f"{self.variant} corrects the samples it was fitted on and cannot be applied to other "
                "samples; refit it on the combined data"
            )
        obs = adata.obs.copy()
        if fitted_on:
            obs[FIT_COL] = self._fitted[1]
        elif FIT_COL not in obs:  # new data: its own controls give the per-batch and per-position statistics
            obs[FIT_COL] = obs["is_control"].to_numpy(dtype=bool)
        with fixed_threads():
            rows = Rows(adata.X, obs, source, self.in_features)
            for step, ctx in zip(self.steps, self._fitted[2] if fitted_on else [None] * len(self.steps), strict=True):
                rows = rows.then(step, ctx if fitted_on else step.context(rows))
            y = self.steps[-1].corrected_ if self.transductive else self._apply_all(rows)
        uns = dict(adata.uns)
        uns["transform"] = {"variant": self.variant, "steps": [s.name for s in self.steps],
                            "params": asdict(self.params), "diagnostics": self.info,
                            "cellica_version": __version__, "in_features": len(self.in_features)}
        for step, ctx in zip(self.steps, rows.contexts, strict=True):
            if (report := step.report(ctx)) is not None:
                uns[step.uns_key] = report
        return make_adata(y, obs, rows.names, uns, source)

    def _fitted_on(self, adata) -> bool:
        """Whether ``adata`` holds the very samples this transform was fitted on, in order."""
        fitted = getattr(self, "_fitted", None)
        return fitted is not None and fitted[0].equals(pd.Index(adata.obs_names.astype(str)))

    def _apply_all(self, rows: Rows) -> np.ndarray:
        """Every row through the steps, block by block into one float32 matrix (the output contract)."""
        blocks = row_blocks(rows.x.shape[0])
        out = None
        for sl in progress(blocks, desc=f"{self.variant}: transform", unit="block") if len(blocks) > 1 else blocks:
            y = rows.block(sl)
            if out is None:
                out = np.empty((rows.x.shape[0], y.shape[1]), np.float32)
            out[sl] = y
        return out

    def fit_transform(self, adata, y=None):
        """Fit on ``adata`` and transform it (scikit-learn's ``fit_transform``)."""
        return self.fit(adata).transform(adata)

    # -- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted state to ``.npz`` (arrays + JSON metadata, no pickle)."""
        path = Path(path)
        with atomic_output(path, overwrite=True) as tmp:
            self.write(tmp)
        return path

    def write(self, path: str | os.PathLike) -> None:
        """Write the fitted state to ``path`` as it is (no temporary file; see :meth:`save`)."""
        arrays = self.arrays
        meta = {"variant": self.variant, "steps": [s.name for s in self.steps], "params": asdict(self.params),
                "info": self.info, "in_features": self.in_features, "cellica_version": __version__,
                "arrays_sha256": arrays_digest(arrays)}
        with open(path, "wb") as fh:
            np.savez_compressed(fh, __meta__=np.array(json.dumps(meta)), **arrays)

    @staticmethod
    def load(path: str | os.PathLike) -> Transform:
        """Load a transform written by :meth:`save`: its steps, rebuilt from the variant and
        parameters, each given the arrays it owns."""
        from cellica.transform.variants import compose, make_transform

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
        obj = make_transform(meta["variant"], TransformParams(**meta["params"]))
        obj.steps, obj.info, obj.in_features = compose(obj.variant, obj.params), meta["info"], meta["in_features"]
        for step in obj.steps:
            missing = [k for k in step.owns if k not in arrays]
            if missing and not step.transductive:
                raise CellicaError(f"transform model {path}: step {step.name} lacks its arrays {missing}; fit it again")
            step.arrays.update({k: arrays[k] for k in step.owns if k in arrays})
        return obj

    def _source(self, adata) -> str:
        prov = adata.uns.get("provenance", {}) if hasattr(adata, "uns") else {}
        return f"{self.variant} on {prov.get('table', prov.get('store', 'features'))}"
