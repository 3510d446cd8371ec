"""Identifiability: how well two embeddings align per class of map, and recovery of known
ground truth (MCC, probe R^2, InfoM/InfoE/InfoC)."""

from cellica.core.lazy import lazy_exports

# The stage's public functions and parameter classes, each imported when first used.
_PUBLIC = {
    "align": "cellica.identify.align",
    "align_files": "cellica.identify.files",
    "AlignParams": "cellica.identify.params",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
