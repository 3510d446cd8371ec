"""The steps a transform is composed of, and the rows they see.

A variant (:data:`cellica.registry.VARIANTS`) is a named composition of steps: every
variant may correct well positions and standardise first, the PCA family then drops
features, centres batches, whitens and rotates. Each step is a scikit-learn estimator
(``get_params``/``clone``) with three parts:

* ``fit(rows)`` learns its arrays from its input: the stored rows through the steps before it;
* ``context(rows)`` computes what applying it needs from the data being transformed (each
  batch's or position's control statistics: a new plate is corrected by its own controls);
* ``apply(x, obs, ctx)`` maps a block of float64 rows.

:class:`Rows` passes the stored (float32) matrix through the steps before a given one block
by block (:mod:`cellica.transform._rows`), so no step ever holds a float64 copy of the whole
matrix, and a step computes on the very values the transform writes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from cellica.core.contracts import FIT_COL
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.scales import constant, inverse_scale, moments
from cellica.transform._rows import batch_keys, batch_stats, constant_in_batches, correct, row_blocks

log = get_logger("transforms")


def controls_mask(obs: pd.DataFrame) -> np.ndarray:
    """The controls whose statistics the transforms use (those marked ``transform_fit``)."""
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    return ctrl & obs[FIT_COL].to_numpy(dtype=bool) if FIT_COL in obs else ctrl


def usable_rows(obs: pd.DataFrame) -> np.ndarray:
    """All samples except the controls held back for evaluation."""
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    return ~ctrl | controls_mask(obs)


def fit_rows(obs: pd.DataFrame, fit_on: str, source: str) -> np.ndarray:
    """The rows a whitening is fit on: the fitting controls, or (``all``) every usable row."""
    if fit_on == "all":
        return usable_rows(obs)
    ctrl = controls_mask(obs)
    if not ctrl.any():
        raise CellicaError(f"{source}: no control samples (is_control is false everywhere); "
                           "whitening on controls needs them (or set fit_on: all)")
    return ctrl


class Rows:
    """The data as one step sees it: the stored rows through the steps before it.

    Parameters
    ----------
    x
        The stored matrix (float32, as read).
    obs
        Its metadata, with ``transform_fit`` marking the fitting controls.
    source
        Named in messages.
    names
        The feature names at this point of the composition.
    steps, contexts
        The fitted steps before this point and their contexts on this data.
    """

    def __init__(self, x, obs: pd.DataFrame, source: str, names: list[str], steps=(), contexts=()):
        self.x, self.obs, self.source, self.names = x, obs, source, list(names)
        self.steps, self.contexts = tuple(steps), tuple(contexts)

    @property
    def n_features(self) -> int:
        """How many features the rows have at this point."""
        return len(self.names)

    def then(self, step: Step, ctx) -> Rows:
        """These rows passed through one more (fitted) step."""
        return Rows(self.x, self.obs, self.source, step.out_names(self.names), (*self.steps, step),
                    (*self.contexts, ctx))

    def block(self, rows) -> np.ndarray:
        """A slice of rows through the steps: a private float64 array."""
        y = np.array(self.x[rows], dtype=np.float64)
        obs = self.obs.iloc[rows]
        for step, ctx in zip(self.steps, self.contexts, strict=True):
            y = step.apply(y, obs, ctx)
        return y

    def rows(self, mask: np.ndarray) -> np.ndarray:
        """The rows of ``mask`` through the steps, computed on blocks of all rows (so their
        values are the ones the transform writes), in data order."""
        if not self.steps:  # nothing row-dependent to apply: read just these rows
            return np.array(self.x[mask], dtype=np.float64)
        out, at = None, 0
        for sl in row_blocks(self.x.shape[0]):
            keep = mask[sl]
            if not keep.any():
                continue
            y = self.block(sl)
            if out is None:  # in the blocks' memory order: sums over it then run as they always have
                fortran = y.flags.f_contiguous and not y.flags.c_contiguous
                out = np.empty((int(mask.sum()), y.shape[1]), y.dtype, order="F" if fortran else "C")
            y = y[keep]
            out[at: at + y.shape[0]] = y
            at += y.shape[0]
        if out is None:
            raise CellicaError(f"{self.source}: no rows to fit on")
        return out

    def all(self) -> np.ndarray:
        """Every row through the steps."""
        return self.rows(np.ones(self.x.shape[0], bool))


class Step(BaseEstimator):
    """A step of a transform (see the module's text). Subclasses set ``name`` (how the registry
    names them), ``uses`` (the :class:`~cellica.transform.params.TransformParams` fields they
    read), ``owns`` (the arrays they save), and ``prefix`` when they name their outputs."""

    name: ClassVar[str] = ""
    uses: ClassVar[tuple[str, ...]] = ()
    owns: ClassVar[tuple[str, ...]] = ()
    prefix: ClassVar[str] = ""  # "": its outputs keep their input's names
    transductive: ClassVar[bool] = False  # corrects the rows it was fit on, and maps no others
    uns_key: ClassVar[str] = ""  # where a transformed file's .uns records report(ctx)

    @classmethod
    def from_params(cls, p, arg: str | None = None) -> Step | None:
        """The step as the transform's parameters ``p`` configure it (None: switched off)."""
        return cls()

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The fitted arrays the step saves (name -> array)."""
        return self.__dict__.setdefault("arrays_", {})

    @property
    def info(self) -> dict[str, Any]:
        """What the fit found, for the provenance (counts, flags)."""
        return self.__dict__.setdefault("info_", {})

    def fit(self, rows: Rows) -> Step:
        """Learn the step's arrays from ``rows`` (nothing to learn: itself)."""
        return self

    def context(self, rows: Rows) -> Any:
        """What applying needs from the data being transformed, computed once per data."""
        return None

    def apply(self, x: np.ndarray, obs: pd.DataFrame, ctx) -> np.ndarray:
        """The step applied to a block of rows ``x`` with their ``obs`` (identity here)."""
        return x

    def out_names(self, names: list[str]) -> list[str]:
        """The names of its outputs: numbered by ``prefix`` when it has one, else its input's."""
        return [f"{self.prefix}{i + 1}" for i in range(len(names))] if self.prefix else names

    def report(self, ctx) -> dict | None:
        """What the transformed file's ``.uns[uns_key]`` records of this data's context (None: nothing)."""
        return None


def step_class(name: str) -> type[Step]:
    """The step called ``name`` in the registry (a :class:`Step` subclass's ``name``): no second
    list of steps to keep in step with the registry."""
    found, todo = {}, [Step]
    while todo:
        cls = todo.pop()
        if cls.name:
            found.setdefault(cls.name, cls)
        todo.extend(cls.__subclasses__())
    if name not in found:
        raise CellicaError(f"the registry names step {name!r}, but no transform step has that name; "
                           f"known: {', '.join(sorted(found))}")
    return found[name]


class Standardize(Step):
    """One global z-score on all fitting controls at once (no per-batch statistics)."""

    name = "standardize"
    uses = ("standardize",)
    owns = ("standardize_mean", "standardize_scale")

    @classmethod
    def from_params(cls, p, arg=None):
        """The step when ``standardize`` is ``controls`` (None: off)."""
        return cls() if p.standardize == "controls" else None

    def fit(self, rows):
        """Each feature's mean and inverse scale on all fitting controls."""
        ctrl = controls_mask(rows.obs)
        if ctrl.sum() < 2:
            raise CellicaError(
                f"{rows.source}: standardize: controls needs >= 2 fitting controls, got {int(ctrl.sum())}"
            )
        mean, sd = moments(rows.rows(ctrl))
        # Each feature on its own scale: one whose controls do not vary (judged against its own
        # magnitude, never another feature's) is centred but not scaled, and the whitening's
        # drop_features step drops or refuses it (drop_constant).
        const = constant(mean, sd)
        self.arrays["standardize_mean"] = mean
        self.arrays["standardize_scale"] = inverse_scale(mean, sd)
        self.info["constant_features"] = int(const.sum())
        if const.any():
            log.warning("%s: standardize: %d feature(s) do not vary on the fitting controls, e.g. %s: centred, "
                        "not scaled", rows.source, int(const.sum()), [rows.names[i] for i in np.flatnonzero(const)[:5]])
        log.info("%s: standardised every feature on all %d fitting controls at once", rows.source, int(ctrl.sum()))
        return self

    def apply(self, x, obs, ctx):
        """The z-score of each feature."""
        return (x - self.arrays["standardize_mean"]) * self.arrays["standardize_scale"]


class DropFeatures(Step):
    """Drop constant features (an error unless ``drop_constant``) and, with ``outlier_cutoff``,
    those beyond it in robust z-units, judged on ``rows``: the whitening's fit rows (``fit``,
    by ``fit_on``), the fitting ``controls``, or ``all`` rows. With ``scale_batches`` (the batch
    key, when ``center_scale`` divides each batch by its controls' spread before the whitening)
    a feature constant on one batch's fitting controls counts as constant too. Each feature is
    judged on its own magnitude (:mod:`cellica.core.scales`)."""

    name = "drop_features"
    # with rows "fit" (the PCA family's), also the whitening's fit_on and, with center_scale before
    # it, the batch handling: parameters every variant with such a step already depends on
    uses = ("drop_constant", "outlier_cutoff")
    owns = ("keep",)

    def __init__(self, rows: str = "fit", fit_on: str = "controls", drop_constant: bool = False,
                 outlier_cutoff: float | None = None, scale_batches: str | None = None):
        self.rows, self.fit_on, self.drop_constant, self.outlier_cutoff = rows, fit_on, drop_constant, outlier_cutoff
        self.scale_batches = scale_batches

    @classmethod
    def from_params(cls, p, arg=None):
        """The step for the fit rows ``arg`` (default ``fit``) as ``p`` configures it."""
        rows = arg or "fit"
        scaled = rows == "fit" and p.batch_correction == "center_scale" and p.batch_stage == "before"
        return cls(rows, p.fit_on, p.drop_constant, p.outlier_cutoff, p.batch_key if scaled else None)

    def fit(self, rows):
        """Which features to keep, judged on the step's rows."""
        if self.rows == "fit":
            mask = fit_rows(rows.obs, self.fit_on, rows.source)
        elif self.rows == "controls":
            mask = controls_mask(rows.obs)
            if not mask.any():
                raise CellicaError(f"{rows.source}: no control samples to fit on")
        else:
            mask = np.ones(len(rows.obs), bool)
        also = None
        if self.scale_batches is not None:
            ctrl = controls_mask(rows.obs)
            also = constant_in_batches(rows.rows(ctrl), batch_keys(rows.obs, self.scale_batches, rows.source)[ctrl])
        keep = check_constant(rows.rows(mask), rows.names, self.drop_constant, self.outlier_cutoff, rows.source,
                              also)
        self.arrays["keep"] = keep
        self.info["dropped_constant"] = int((~keep).sum())
        return self

    def apply(self, x, obs, ctx):
        """The kept features of ``x``."""
        keep = self.arrays["keep"]
        # x[:, keep] is a Fortran-ordered copy, and the layout decides the last bits of the sums
        # after it: the whitening's fit rows skip the copy when nothing is dropped, the
        # comparators' always make it, as these transforms always have.
        return x if self.rows == "fit" and keep.all() else x[:, keep]

    def out_names(self, names):
        """The kept features' names."""
        return [n for n, k in zip(names, self.arrays["keep"], strict=True) if k]


class CentreBatches(Step):
    """Per-batch centring (``center``) or standardisation (``center_scale``) by the statistics of
    this data's controls, at ``stage`` ``before`` or ``after`` the whitening (``batch_stage``)."""

    name = "centre_batches"
    uses = ("batch_correction", "batch_stage", "batch_key")

    def __init__(self, batch_key: str = "batch", scale: bool = False):
        self.batch_key, self.scale = batch_key, scale

    @classmethod
    def from_params(cls, p, arg=None):
        """The step when batch correction runs at stage ``arg`` (default ``before``; None: off)."""
        on = p.batch_correction is not None and p.batch_stage == (arg or "before")
        return cls(p.batch_key, p.batch_correction == "center_scale") if on else None

    def context(self, rows):
        """Each batch's control centre (and spread, with ``scale``) on this data."""
        keys = batch_keys(rows.obs, self.batch_key, rows.source)
        ctrl = controls_mask(rows.obs)
        return batch_stats(rows.rows(ctrl), keys[ctrl], pd.unique(keys), self.scale, rows.source, rows.names)

    def apply(self, x, obs, ctx):
        """``x`` centred (and scaled) by its rows' batch statistics."""
        return correct(x, obs[self.batch_key].to_numpy(), ctx, self.scale)


def check_constant(x: np.ndarray, names: list[str], drop_constant: bool, outlier_cutoff: float | None,
                   source: str, also: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of the features to keep; constant ones (each judged on its own magnitude,
    :func:`cellica.core.scales.constant`; ``also``: more counted as constant, e.g. on one batch's
    controls) are an error unless ``drop_constant``, and with ``outlier_cutoff`` features beyond
    it in robust z-units (:func:`robust_z_max`) are dropped."""
    const = constant(*moments(x))
    where = "on the fit set"
    if also is not None and (also & ~const).any():
        const = const | also
        where = "on the fit set or on one batch's controls (center_scale divides by their spread)"
    if const.any():
        listed = [names[i] for i in np.flatnonzero(const)[:5]]
        if not drop_constant:
            raise CellicaError(
                f"{source}: {int(const.sum())} feature(s) are constant {where}, e.g. {listed}; "
                "they carry no information and cannot be scaled: set drop_constant: true to drop them (recorded)"
            )
        log.warning("dropping %d constant feature(s), e.g. %s", int(const.sum()), listed)
    keep = ~const
    if outlier_cutoff is not None:
        beyond = keep & (robust_z_max(x) > outlier_cutoff)
        if beyond.any():
            listed = [names[i] for i in np.flatnonzero(beyond)[:5]]
            log.warning("dropping %d feature(s) beyond %g robust z-units on the fit set, e.g. %s",
                        int(beyond.sum()), outlier_cutoff, listed)
        keep &= ~beyond
        if not keep.any():
            raise CellicaError(f"{source}: every feature is beyond outlier_cutoff {outlier_cutoff} on the fit set; "
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
