"""Parameters of the transform stage: whitening, ICA and the comparators (config section
``transform``), and the ICA settings shared with the alignment of two embeddings."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.errors import CellicaError
from cellica.core.params import Params, like, param
from cellica.transform.ica import BACKENDS


@dataclass(kw_only=True)
class IcaParams(Params):
    """ICA solver settings, shared by the ``pca_ica`` transform and ``cellica align``."""

    section = "transform"

    backend: str = param("cellica", "ICA solver: cellica (orthogonal L-BFGS in torch float32, CPU or GPU), "
                         "sklearn (FastICA) or picard (python-picard, Picard-O).", choices=tuple(BACKENDS))
    max_iter: int = param(1000, "Iteration cap of the ICA (a fit that hits it is flagged as not converged).",
                          ge=1)
    tol: float = param(1e-4, "Convergence tolerance: the largest entry of the relative gradient "
                       "E[psi(y) y^T] - E[y psi(y)^T] (cellica back-end; sklearn and picard use their own "
                       "criteria). Looser values stop fits before they have separated anything (the gradient "
                       "is small on the near-Gaussian mixtures of a random start).", gt=0)
    device: str = param("auto", "Device of the cellica ICA back-end: auto, cpu, cuda.")
    max_samples: int | None = param(100000, "Seeded subsample cap of the ICA fit set.", ge=10)


@dataclass(kw_only=True)
class TransformParams(Params):
    """Feature transforms, one job and one features file per variant (`cellica transform --help`)."""

    section = "transform"

    fit_on: str = param("controls", "Samples the PCA whitening is fit on.", choices=("controls", "all"))
    fit_fraction: float = param(0.5, "Share of each batch's controls (a seeded split on transform.seed, the same "
                                "for every variant) that fits the transforms; the rest are held back and are the "
                                "only controls the classifiers, batch metrics and mAP use. Fitting and evaluating "
                                "on the same controls leaks (optimistic AUROC). 1.0 fits on every control and the "
                                "evaluation then reuses them, with a warning in the logs.", gt=0, le=1)
    standardize: str | None = param(None, "controls: z-score every feature once on all fitting controls together "
                                    "(one mean and sd, no per-batch statistics; the profiling recipes' DMSO "
                                    "standardisation), before any other step of every variant, base included. "
                                    "null: no standardisation.", choices=("controls",))
    position_correction: bool = param(False, "Well-position correction before every variant (base included): "
                                      "subtract each well position's offset, the mean over the fitting controls "
                                      "at that position on every plate of their profile minus their plate's "
                                      "control mean. Logged with the same-position control mAP before and after.")
    position_table: str | None = param(None, "CSV/TSV of well -> position (columns well, position, optionally "
                                       "plate) when well names are not positions; every well must be listed.")
    n_components: float | None = param(None, "Components kept: a count (>= 1), a fraction of variance (< 1), or "
                                       "null for all with non-zero variance. Must not exceed the fit rows - 1.",
                                       gt=0)
    eig_floor: float = param(1e-6, "Eigenvalues below this fraction of the largest are floored (explicit "
                             "n_components) or dropped (null), so tiny components don't explode.", ge=0)
    batch_correction: str | None = param("center", "Per-batch handling in the PCA family: null (one global "
                                         "fit), center (subtract each batch's control mean), center_scale (also "
                                         "divide by its control std). Default center: removes additive batch "
                                         "offsets and keeps one global linear map, as the identifiability argument "
                                         "needs.", choices=("center", "center_scale"))
    batch_stage: str = param("before", "Apply the per-batch correction to the raw features (before the whitening) "
                             "or to the whitened ones (after: the TVN practice). Irrelevant for center.",
                             choices=("before", "after"))
    batch_key: str = param("batch", "Metadata column naming the batch.")
    drop_constant: bool = param(False, "Drop features that are constant on the fit set (recorded) instead of "
                                "stopping with an error.")
    outlier_cutoff: float | None = param(None, "Drop features whose largest robust z-score on the fit set, |x - "
                                         "median| / (1.4826 MAD), exceeds this (a feature with zero MAD that "
                                         "varies at all counts as beyond it); the mask is recorded. For "
                                         "CellProfiler-style profiles, whose higher-order moments are heavy-tailed: "
                                         "pycytominer's drop_outliers uses 500. null: keep every feature.", gt=0)
    ica_backend: str = like(IcaParams, "backend")
    ica_fit_on: str = param("controls", "Samples the ICA is fit on. Controls: where the whitening holds. All: the "
                            "fit set is re-whitened first (logged).", choices=("controls", "all"))
    ica_max_samples: int | None = like(IcaParams, "max_samples")
    ica_max_iter: int = like(IcaParams, "max_iter")
    ica_tol: float = like(IcaParams, "tol")
    ica_device: str = like(IcaParams, "device")
    sphering_epsilon: float = param(1e-6, "Regulariser added to the eigenvalues of the ZCA whitening.", ge=0)
    harmony_theta: float = param(2.0, "Harmony diversity penalty.", ge=0)
    harmony_max_iter: int = param(10, "Harmony iterations.", ge=1)
    seed: int = param(0, "Seed of the split of the controls into fitting and held-back ones, and of the ICA "
                      "initialisation and subsample, the random rotation and Harmony (for evaluation seeds after "
                      "the first, those use the evaluation seed).")
    rotation_seed: int | None = param(None, "Seed of the ICA start and subsample, the random rotation and Harmony "
                                      "(default: seed); the workflow sets it per evaluation seed.", config=False)

    @property
    def random_seed(self) -> int:
        """Seed of the ICA start and subsample, the random rotation and Harmony: ``rotation_seed``
        when set (``evaluate.seeds`` re-seeds these per evaluation seed), else ``seed``. The
        split of the controls into fitting and held-back ones always follows ``seed``."""
        return self.seed if self.rotation_seed is None else self.rotation_seed

    @property
    def ica(self) -> IcaParams:
        """The ICA settings as the shared :class:`IcaParams`."""
        return IcaParams(backend=self.ica_backend, max_iter=self.ica_max_iter, tol=self.ica_tol,
                         device=self.ica_device, max_samples=self.ica_max_samples)

    def check(self) -> None:
        """Refuse a component count that is neither a whole count nor a variance fraction."""
        nc = self.n_components
        if nc is not None and nc > 1 and nc != int(nc):
            raise CellicaError(f"transform.n_components must be a whole count (>= 1) or a variance fraction "
                               f"(< 1), got {nc}")
