"""Parameters of the evaluation stage (config section ``evaluate``)."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.params import Params, param
from cellica.registry import BASELINE_NAMES, BASELINES, DEFAULT_BASELINES

BINNINGS = ("lightgbm", "controls")


@dataclass(kw_only=True)
class EvalParams(Params):
    """Per-gene LightGBM classifiers against the shared controls, and batch metrics
    (`cellica evaluate --help`).

    The classifier defaults are the paper's Table 6 (``is_unbalance``, learning rate
    0.05, 31 leaves, feature fraction 0.6, L1 5, L2 1) with LightGBM's own binning of
    every training set (``binning: lightgbm``, ``max_bin`` 255).
    """

    section = "evaluate"

    level: str = param("tiles", "Classify tiles, or well means. Default tiles: a gene has few wells, too few to "
                       "train and test across held-out batches, while its tiles give the classifier enough "
                       "samples; well means are the level of the mAP.", choices=("tiles", "wells"))
    split: str = param("batch", "batch: one fold per batch holding out that batch's perturbed and control samples "
                       "(generalisation to unseen batches); random: stratified 3-fold split. Genes in a single "
                       "batch always fall back to random and are flagged.", choices=("batch", "random"))
    batch_key: str = param("batch", "Metadata column naming the batch the classifiers hold out (it may differ "
                           "from transform.batch_key, e.g. correct per plate, hold out per "
                           "experiment).")
    n_trees: int = param(100, "Boosting rounds.", ge=1)
    learning_rate: float = param(0.05, "LightGBM learning rate (paper default).", gt=0)
    num_leaves: int = param(31, "LightGBM leaves per tree (paper default).", ge=2)
    feature_fraction: float = param(0.6, "Features sampled per tree (paper default).", gt=0, le=1)
    reg_alpha: float = param(5.0, "L1 regularisation (paper default).", ge=0)
    reg_lambda: float = param(1.0, "L2 regularisation (paper default).", ge=0)
    is_unbalance: bool = param(True, "Reweight the rarer class (paper default).")
    min_data_in_leaf: int = param(20, "LightGBM minimum samples per leaf.", ge=1)
    max_bin: int = param(255, "Histogram bins per feature (LightGBM's max_bin; the paper's recipe uses "
                         "LightGBM's default 255).", ge=2)
    binning: str = param("lightgbm", "lightgbm (default, the paper's recipe): a fresh LightGBM Dataset per fit "
                         "that bins its own training set. controls: a faster path that cuts every feature once at "
                         "quantiles of the controls and trains on row subsets of one Dataset; it changes AUROC and "
                         "sparsity (benchmarks/evaluate.py measures by how much) and is flagged in the logs and the "
                         "tables' provenance.", choices=BINNINGS)
    importance_type: str = param("gain", "Feature importance for sparsity and concentration (recorded; it changes "
                                 "the numbers a lot).", choices=("gain", "split"))
    top_fraction: float = param(0.25, "The top share of features in which concentration is measured.", gt=0, lt=1)
    min_samples: int = param(4, "Genes with fewer samples are skipped (with the reason in the table).", ge=2)
    max_controls: int | None = param(None, "Control budget: the most controls one classifier trains on, a seeded "
                                     "subsample of its training controls stratified by batch, drawn per gene and "
                                     "fold (null: every control, the paper's recipe). Test rows keep every control. "
                                     "benchmarks/controls.py measures what a budget changes and saves.", ge=10)
    min_controls_per_batch: int = param(50, "Control budget only: the least controls drawn from each batch of a "
                                        "training set (all of them when a fold has fewer); a batch with fewer "
                                        "controls than this in the whole table is an error.", ge=1)
    max_batch_samples: int = param(5000, "Seeded subsample cap of the controls for the batch metrics.", ge=10)
    map_null_size: int = param(10000, "Permutation null size of the copairs mAP p-values.", ge=100)
    map_threshold: float = param(0.05, "FDR threshold at which a perturbation counts as active.", gt=0, le=1)
    seeds: list[int] = param([0], "Seeds of the classifiers (LightGBM and the random splits); for pca_ica, "
                             "pca_rand and harmony each seed after the first also re-fits the transform with that "
                             "seed (ICA start, random rotation). Seed noise is reported apart from gene-sampling "
                             "noise. The first seed also seeds the batch-metric subsample and the mAP null.",
                             min_items=1, unique=True)
    n_boot: int = param(2000, "Bootstrap resamples of the 95% intervals (genes for the per-gene metrics, controls "
                        "for the batch classifiers); at least 100 for a 95% interval.", ge=100)

    @property
    def seed(self) -> int:
        """The first seed: subsamples and permutation nulls that are not repeated per seed."""
        return int(self.seeds[0])


@dataclass(kw_only=True)
class BaselineParams(Params):
    """Baselines every result is read against (docs/evaluation.md, "Baselines"): each is a feature
    set evaluated by the same per-gene classifiers, with intervals, and the winning variant of
    each claim is compared with it (the claims' ``baselines`` column)."""

    section = "baselines"

    names: list[str] = param(list(DEFAULT_BASELINES), "Which baselines to evaluate beside the variants: "
                             + ", ".join(BASELINE_NAMES) + ". One that does not apply to the run (untrained with "
                             "mae.checkpoint, profiles.enabled or source features, classical with profiles.enabled "
                             "or source features, cell_count of "
                             "imported features without cell_count_column) is left out and the run log says why. "
                             "classical needs cp_measure (the profiles extra).", item_choices=BASELINES,
                             unique=True, cli=False)
    cell_count_column: str | None = param(None, "Imported features only: the column (in `.obs`, e.g. "
                                          "Metadata_Count_Cells, or a feature) holding each sample's cell count.")
