"""Gene-level maps: aggregation of a variant's profiles to one per gene, guide consistency, and
recall of known gene-gene relationships (EFAAR-style)."""

from cellica.core.lazy import lazy_exports

# The stage's public functions and parameter classes, each imported when first used.
_PUBLIC = {
    "gene_map": "cellica.maps.files",
    "gene_map_files": "cellica.maps.files",
    "recall_files": "cellica.maps.files",
    "read_map": "cellica.maps.files",
    "MapParams": "cellica.maps.params",
}
__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
