"""Gene-level maps: aggregation of a variant's profiles to one per gene, guide consistency, and
recall of known gene-gene relationships (EFAAR-style)."""

from cellica.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "gene_map": "cellica.maps.gene_maps",
    "gene_map_files": "cellica.maps.gene_maps",
    "recall_files": "cellica.maps.gene_maps",
    "read_map": "cellica.maps.gene_maps",
    "MapParams": "cellica.maps.params",
})
