"""The registry: every list of names the pipeline knows, defined once and torch-free.

* **Variants** (:data:`VARIANTS`): name, what it does, the steps it is composed of, the parameters
  its result depends on, whether it is re-fit per evaluation seed, and its role (one of the
  paper's four, or a comparator). The schema's choices, the CLI, the DAG (each variant's rule
  receives only the parameters it uses), :func:`cellica.transform.make_transform`, the report's
  order, the docs' table, the benchmarks and the tests read it.
* **Metrics** (:data:`METRICS`), by kind: per-gene (with the per-gene table's column),
  activity, batch, map, truth, and the per-variant counts. The summary, the comparisons, the
  claims, the report's rows and labels and the README's demo table read it.
* **Comparisons and claims**: the paired comparisons (:data:`PAIRS`, every pair of the
  paper's variants in the claimed order) and the paper's claims (:data:`CLAIMS`).

Adding a variant is one :class:`Variant` entry here, naming its steps (and, when it needs an
operation no step has, that step: a :class:`cellica.transform.steps.Step` subclass); everything
else is derived (``tests/test_registry.py`` proves no other list of names exists).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

# ---------------------------------------------------------------------------- variants
# Every variant splits the controls into fitting and held-back ones, and may correct well
# positions and then standardise first (COMMON_STEPS; each is off unless its parameter is set).
_SPLIT = ("fit_fraction", "seed", "batch_key", "standardize", "position_correction", "position_table")
_PCA = _SPLIT + ("fit_on", "n_components", "eig_floor", "batch_correction", "batch_stage", "drop_constant",
                 "outlier_cutoff")
_ICA = ("ica_backend", "ica_fit_on", "ica_max_samples", "ica_max_iter", "ica_tol", "ica_device")
COMMON_STEPS = ("correct_positions", "standardize")
# Feature dropping on the whitening's fit rows, batch centring before (or after) the whitening.
_WHITEN = ("drop_features", "centre_batches:before", "pca", "centre_batches:after")


@dataclass(frozen=True)
class Variant:
    """One transform variant: a named composition of steps."""

    name: str
    help: str
    steps: tuple[str, ...]  # after COMMON_STEPS; "name" or "name:arg" of a cellica.transform.steps.Step
    uses: tuple[str, ...]  # TransformParams fields its result depends on
    seeded: bool = False  # depends on rotation_seed: re-fit per evaluation seed
    role: str = "paper"  # paper (the paper's four) or comparator
    reference: bool = False  # the features unchanged: the row every claim starts from, and the baselines' path


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("base", "the features unchanged (after the optional position correction and standardisation): the "
            "reference row", (), _SPLIT, reference=True),
    Variant("pca", "PCA whitening fit on the controls, centred on them; eigenvalue floor; per-batch handling by "
            "`batch_correction`", _WHITEN, _PCA),
    Variant("pca_ica", "`pca`, then the ICA rotation (fit on the whitened fit controls, where the whitening holds; "
            "a fit set that is not white, e.g. `ica_fit_on: all`, is re-whitened first and that is logged)",
            (*_WHITEN, "ica"), _PCA + _ICA, seeded=True),
    Variant("pca_rand", "`pca`, then a seeded Haar-random rotation: the control showing ICA's rotation matters",
            (*_WHITEN, "random_rotation"), _PCA, seeded=True),
    Variant("sphering", "ZCA whitening on the controls (pycytominer `Spherize`, the JUMP recipe)",
            ("drop_features:controls", "zca"), _SPLIT + ("drop_constant", "outlier_cutoff", "sphering_epsilon"),
            role="comparator"),
    Variant("harmony", "harmonypy on the control-PCA scores (unscaled), batch from `batch_key` (transductive: "
            "cannot map new samples)", ("drop_features", "centre_batches:before", "pca:scores", "harmony"),
            _PCA + ("harmony_theta", "harmony_max_iter"), seeded=True, role="comparator"),
    Variant("combat", "scanpy's ComBat on the features (transductive)", ("drop_features:all", "combat"),
            _SPLIT + ("drop_constant", "outlier_cutoff"), role="comparator"),
)}
VARIANT_NAMES = tuple(VARIANTS)
PAPER_VARIANTS = tuple(name for name, v in VARIANTS.items() if v.role == "paper")
REFERENCE_VARIANT = next(name for name, v in VARIANTS.items() if v.reference)


def seeded_variants() -> list[str]:
    """Variants whose result depends on the random seed (re-fit per evaluation seed)."""
    return [name for name, v in VARIANTS.items() if v.seeded]


def variants_markdown() -> str:
    """The variant table of docs/configuration.md (written by ``cellica schema --docs``)."""
    rows = ["| variant | what it does | steps (after the common ones) | role | re-fit per seed |",
            "|---|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.help} | {' → '.join(f'`{s}`' for s in v.steps) or '(none)'} | {v.role} | "
             f"{'yes' if v.seeded else 'no'} |" for v in VARIANTS.values()]
    return "\n".join(rows)


def variant_order(names) -> list[str]:
    """Names in the registry's order: the variants, then the baselines (unknown names last, alphabetically)."""
    order = list(VARIANTS) + list(BASELINES)
    return sorted(names, key=lambda v: (order.index(v) if v in order else len(order), v))


# ---------------------------------------------------------------------------- baselines
@dataclass(frozen=True)
class Baseline:
    """A feature set any result should beat: evaluated by the same classifiers as the variants."""

    name: str
    help: str
    sources: tuple[str, ...]  # the config's `source` values it applies to
    metrics: tuple[str, ...]  # the compared metrics the winning variant is compared with it on
    model: str  # the {model} tag of its embeddings (MODELS) on image sources
    default: bool = False  # evaluated unless `baselines.names` says otherwise
    # (config setting, why): a truthy setting rules the baseline out, and the run log says why
    not_with: tuple[tuple[str, str], ...] = ()
    column: str | None = None  # imported features: the `baselines` setting naming its column (required)


_IMAGES_ONLY = ("simulate", "ingest")
BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("cell_count", "one feature per sample: nuclei per tile (Otsu on `profiles.nuclei_channel`, as the "
             "profiles path finds them), or the column `baselines.cell_count_column` of imported features",
             (*_IMAGES_ONLY, "features"), ("auroc_heldout",), model="cell_count", default=True,
             column="cell_count_column"),
    Baseline("untrained", "the same MAE architecture with its initial weights (`mae.seed`, no training step), "
             "embedded exactly like the trained one", _IMAGES_ONLY, ("auroc_heldout", "sparsity", "concentration"),
             model="untrained", default=True, not_with=(
                 ("mae.checkpoint", "the run embeds with mae.checkpoint, whose initial weights cellica cannot know"),
                 ("profiles.enabled", "the run trains no encoder (profiles.enabled) to compare with its untrained "
                                      "one"))),
    Baseline("classical", "cp_measure's CellProfiler-style profiles of the same tiles (the profiles path, "
             "docs/models.md)", _IMAGES_ONLY, ("auroc_heldout", "sparsity", "concentration"), model="cp_measure",
             not_with=(("profiles.enabled", "the run's own features are already cp_measure's profiles "
                                            "(profiles.enabled)"),)),
)}
BASELINE_NAMES = tuple(BASELINES)
DEFAULT_BASELINES = [name for name, b in BASELINES.items() if b.default]


# ------------------------------------------------------------------------ model tags
@dataclass(frozen=True)
class Model:
    """What a ``{model}`` wildcard names: the embeddings of image sources come from one of these."""

    name: str
    pattern: str  # the wildcard's regular expression
    help: str
    encoder: bool  # an MAE's weights embed the tiles (the embed rule makes its embeddings)
    trained: bool = False  # cellica trains it (the train_mae rule)


MODELS: dict[str, Model] = {m.name: m for m in (
    Model("seed", r"seed-?\d+", "an MAE cellica trains with `mae.seed` N (`seed<N>`)", encoder=True, trained=True),
    Model("checkpoint", "checkpoint", "the user's MAE, `mae.checkpoint`", encoder=True),
    Model("untrained", "untrained", "the untrained baseline: the MAE's initial weights", encoder=True),
    Model("cp_measure", "cp_measure", "cp_measure's profiles (`profiles.enabled`, the classical baseline)",
          encoder=False),
    Model("cell_count", "cell_count", "nuclei per tile (the cell_count baseline)", encoder=False),
)}


def model_pattern(*, encoder: bool | None = None, trained: bool | None = None) -> str:
    """The ``{model}`` wildcard's regular expression, over the models with those properties."""
    return "|".join(m.pattern for m in MODELS.values()
                    if (encoder is None or m.encoder == encoder) and (trained is None or m.trained == trained))


def baselines_markdown() -> str:
    """The baseline table of docs/evaluation.md (written by ``cellica schema --docs``)."""
    rows = ["| baseline | what it is | sources | compared on |", "|---|---|---|---|"]
    rows += [f"| `{b.name}` | {b.help} | {', '.join(b.sources)} | {', '.join(b.metrics)} |" for b in BASELINES.values()]
    return "\n".join(rows)


# ------------------------------------------------------------------------ image formats
@dataclass(frozen=True)
class Format:
    """An image format ingestion reads (``ingest.format``)."""

    name: str
    help: str
    source: str  # "module:Class" of its cellica.store.ingest.FieldSource, imported when used


FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("files", "one image file (TIFF/PNG) per field and channel", "cellica.store.image_files:FileFields"),
    Format("ome_zarr", "OME-Zarr HCS plates, one manifest row per well", "cellica.store.omezarr:PlateFields"),
)}


# ----------------------------------------------------------------------------- metrics
@dataclass(frozen=True)
class Metric:
    """One metric of a variant."""

    name: str
    label: str  # "{entity}" is replaced by what the perturbations are called
    higher_is_better: bool | None  # None: no direction (e.g. the chance level)
    kind: str  # gene, activity, batch, map, truth or count (KINDS)
    column: str | None = None  # per-gene metrics: the per-gene table's column (mean over genes)
    compared: bool = False  # paired differences between variants (bootstrap CI, Wilcoxon, Holm)
    short: str = ""  # its row label in the README's demo table (none: not shown there)
    target: float | None = None  # better is closer to this (a batch silhouette's 0), not lower or higher
    # The report's chart of its mean per feature set (index page); a fallback is drawn only
    # where the metric it stands in for has no value (a random split's AUROC for the held-out one).
    chart: bool = False
    fallback_for: str | None = None
    reference: tuple[float, str, str] | None = None  # (value, line label, title note) drawn on the chart
    null_metric: str | None = None  # the metric whose value is the chart's null line instead
    chart_title: str | None = None  # instead of its label; "{entity}" is replaced
    axis_max: float = 1.0  # the chart's axis reaches at least this
    per_feature_count: bool = False  # comparable only between feature sets of one feature count
    split: str | None = None  # per-gene metrics: only genes evaluated on this split (batch or random)

    @property
    def direction(self) -> str:
        """What a reader is told is better."""
        if self.target is not None:
            return f"closer to {self.target:g} is better"
        return {True: "higher is better", False: "lower is better", None: ""}[self.higher_is_better]

    def text(self, entity: str = "gene") -> str:
        """The label with the entity's name (upper case first when the label starts with it)."""
        text = self.label.format(entity=entity)
        return sentence(text) if self.label.startswith("{entity}") else text  # "mAP" stays "mAP"


def sentence(text: str) -> str:
    """``text`` with its first letter upper case and the rest as written (unlike ``str.capitalize``)."""
    return text[:1].upper() + text[1:]


_CHANCE = (0.5, "chance", "")
_EVEN = (0.0, "even", "0 = spread evenly")  # importance spread evenly over the features scores 0
METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("auroc_heldout", "AUROC, held-out batches ({entity}s evaluated on held-out batches)", True, "gene",
           "auroc_mean", compared=True, short="AUROC, held-out batches", chart=True, reference=_CHANCE, split="batch"),
    Metric("auroc_random_split", "AUROC, random split ({entity}s seen in one batch only)", True, "gene",
           "auroc_mean", chart=True, fallback_for="auroc_heldout", reference=_CHANCE, split="random"),
    Metric("auroc_within", "AUROC, within batch (random split)", True, "gene", "auroc_within",
           short="AUROC, within batch"),
    Metric("sparsity", "Hoyer sparsity of importances", True, "gene", "sparsity", compared=True,
           short="Hoyer sparsity", chart=True, reference=_EVEN, per_feature_count=True),
    Metric("concentration", "Concentration in top 25%", True, "gene", "concentration", compared=True,
           short="concentration (top 25%)", chart=True, reference=_EVEN, axis_max=0.5),
    Metric("map_mean", "mAP vs controls", True, "activity"),
    Metric("active_fraction", "Fraction of perturbations active (FDR 5%)", True, "activity"),
    Metric("batch_accuracy", "Batch classifier balanced accuracy, logistic (controls)", False, "batch",
           short="batch accuracy, logistic"),
    Metric("batch_accuracy_lgbm", "Batch classifier balanced accuracy, LightGBM (controls)", False, "batch",
           short="batch accuracy, LightGBM"),
    Metric("chance_accuracy", "... chance level", None, "batch", short="... chance"),
    Metric("silhouette", "Batch silhouette (controls)", False, "batch", target=0.0),
    Metric("knn_mixing", "kNN batch mixing (1 = mixed)", True, "batch", short="kNN batch mixing"),
    Metric("recall", "{entity} map: recall of known relationships (all sources)", True, "map", chart=True,
           null_metric="recall_null", chart_title="{entity} map: recall of known pairs (95% interval)"),
    Metric("recall_null", "... recall expected by chance", None, "map"),
    Metric("guide_consistent_fraction", "{entity} map: {entity}s whose replicates agree (guides, else wells; "
           "FDR 5%)", True, "map"),
    Metric("truth_mcc", "Ground truth: MCC features vs true factors", True, "truth", short="ground truth: MCC"),
    Metric("truth_infom", "Ground truth: InfoM (modularity)", True, "truth", short="ground truth: InfoM"),
    Metric("truth_infoe", "Ground truth: InfoE (explicitness)", True, "truth"),
    Metric("truth_infoc", "Ground truth: InfoC (compactness)", True, "truth"),
    Metric("truth_factor_r2", "Ground truth: factor probe R^2", True, "truth"),
    Metric("truth_batch_r2", "Ground truth: batch-parameter probe R^2 (technical signal left)", False, "truth",
           short="batch-parameter probe R^2"),
    # Per-variant counts (the summary's "count" rows).
    Metric("n_genes", "{entity}s evaluated", None, "count"),
    Metric("n_genes_heldout", "... on held-out batches", None, "count"),
    Metric("n_genes_random_split", "... on a random split (one batch only)", None, "count"),
    Metric("n_genes_no_split", "... whose classifiers made no split (AUROC 0.5 by construction)", None, "count"),
    Metric("n_genes_skipped", "{entity}s skipped (too few samples)", None, "count"),
    Metric("n_features", "features", None, "count"),
)}
KINDS = ("gene", "activity", "batch", "map", "truth", "count")
GENE_METRICS = {name: m for name, m in METRICS.items() if m.column}
COMPARED_METRICS = tuple(name for name, m in METRICS.items() if m.compared)


def metrics_of(*kinds: str) -> tuple[str, ...]:
    """The metrics of the given kinds, in the registry's order."""
    return tuple(name for name, m in METRICS.items() if m.kind in kinds)


# -------------------------------------------------------------------- comparisons and claims
# The paper's variants in the order its claims rank them; every pair of them is compared.
CLAIMED_ORDER = ("pca_ica", "pca", "pca_rand", "base")
PAIRS = list(combinations(CLAIMED_ORDER, 2))


@dataclass(frozen=True)
class Claim:
    """One of the paper's claims: every (metric, better, worse) comparison must go that way."""

    name: str
    parts: tuple[tuple[str, str, str], ...]


CLAIMS = (
    Claim(
        "AUROC (held-out batches): PCA+ICA > PCA > PCA+Rand, Base",
        (("auroc_heldout", "pca_ica", "pca"), ("auroc_heldout", "pca", "pca_rand"), ("auroc_heldout", "pca", "base")),
    ),
    Claim(
        "Sparsity: PCA+ICA highest",
        (("sparsity", "pca_ica", "pca"), ("sparsity", "pca_ica", "pca_rand"), ("sparsity", "pca_ica", "base")),
    ),
    Claim(
        "Concentration: Base < PCA+Rand < PCA < PCA+ICA",
        (
            ("concentration", "pca_rand", "base"),
            ("concentration", "pca", "pca_rand"),
            ("concentration", "pca_ica", "pca"),
        ),
    ),
)
# Every claim's winner (the variant it says is best) is compared with each baseline on the claim's metrics.
CLAIM_WINNER = CLAIMED_ORDER[0]


@dataclass(frozen=True)
class IntervalClaim:
    """A claim judged from intervals rather than paired tests: ``better`` beats every one of
    ``others`` on each of ``metrics`` (the batch claim: lower batch accuracy; the recall claim:
    a recall difference above 0)."""

    name: str  # "{entity}" is replaced by what the perturbations are called
    better: str
    others: tuple[str, ...]
    metrics: tuple[str, ...]


BATCH_CLAIM = IntervalClaim(
    "Batch signal removed: batch classifiers on controls less accurate on PCA+ICA than on Base",
    CLAIM_WINNER, (REFERENCE_VARIANT,), tuple(m for m in metrics_of("batch") if METRICS[m].higher_is_better is False
                                              and METRICS[m].target is None))
RECALL_CLAIM = IntervalClaim(
    "Known relationships: PCA+ICA's {entity} map recalls more known pairs than PCA's and PCA+Rand's",
    CLAIM_WINNER, CLAIMED_ORDER[1:3], ("recall",))
