"""The registry of per-variant metrics: name, label, direction of better, and for per-gene
metrics the per-gene table's column. The summary table, the paired comparisons, the claims
and the report's rows all read this one table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One metric of a variant."""

    name: str
    label: str  # "{entity}" is replaced by what the perturbations are called
    higher_is_better: bool | None  # None: no direction (e.g. the chance level)
    column: str | None = None  # per-gene metrics: the per-gene table's column (mean over genes)
    compared: bool = False  # paired differences between variants (bootstrap CI, Wilcoxon, Holm)

    def text(self, entity: str = "gene") -> str:
        """The label with the entity's name (upper case first when the label starts with it)."""
        text = self.label.format(entity=entity)
        return sentence(text) if self.label.startswith("{entity}") else text  # "mAP" stays "mAP"


def sentence(text: str) -> str:
    """``text`` with its first letter upper case and the rest as written (unlike ``str.capitalize``)."""
    return text[:1].upper() + text[1:]


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("auroc_heldout", "AUROC, held-out batches ({entity}s evaluated on held-out batches)", True,
           "auroc_mean", compared=True),
    Metric("auroc_random_split", "AUROC, random split ({entity}s seen in one batch only)", True, "auroc_mean"),
    Metric("auroc_within", "AUROC, within batch (random split)", True, "auroc_within"),
    Metric("sparsity", "Hoyer sparsity of importances", True, "sparsity", compared=True),
    Metric("concentration", "Concentration in top 25%", True, "concentration", compared=True),
    Metric("map_mean", "mAP vs controls", True),
    Metric("active_fraction", "Fraction of perturbations active (FDR 5%)", True),
    Metric("batch_accuracy", "Batch classifier balanced accuracy, logistic (controls)", False),
    Metric("batch_accuracy_lgbm", "Batch classifier balanced accuracy, LightGBM (controls)", False),
    Metric("chance_accuracy", "... chance level", None),
    Metric("silhouette", "Batch silhouette (controls)", False),
    Metric("knn_mixing", "kNN batch mixing (1 = mixed)", True),
    Metric("recall", "{entity} map: recall of known relationships (all sources)", True),
    Metric("recall_null", "... recall expected by chance", None),
    Metric("guide_consistent_fraction", "{entity} map: {entity}s whose replicates agree (guides, else wells; FDR 5%)", True),
    Metric("truth_mcc", "Ground truth: MCC features vs true factors", True),
    Metric("truth_factor_r2", "Ground truth: factor probe R^2", True),
    Metric("truth_batch_r2", "Ground truth: batch-parameter probe R^2 (technical signal left)", False),
)}
GENE_METRICS = {name: m for name, m in METRICS.items() if m.column}
COMPARED_METRICS = tuple(name for name, m in METRICS.items() if m.compared)
