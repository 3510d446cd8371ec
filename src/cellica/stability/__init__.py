"""Stability across training runs (the paper's Table 1): how well two embeddings of the same
samples (two MAE seeds) map onto each other per class of map: permutation, rigid, linear, and
the ICA's rotation. Recovery of a known ground truth is evaluation's (cellica.evaluate.recovery)."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "align_embeddings": "cellica.stability.align:align",
    "align_files": "cellica.stability.compare_runs",
    "AlignParams": "cellica.stability.params",
})
