"""Identifiability: how well two embeddings align per class of map, and recovery of known
ground truth (MCC, probe R^2, InfoM/InfoE/InfoC)."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "align": "cellica.identify.align",
    "align_files": "cellica.identify.files",
    "AlignParams": "cellica.identify.params",
})
