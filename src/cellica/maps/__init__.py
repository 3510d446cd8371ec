"""Gene-level maps: aggregation of a variant's profiles to one per gene, guide consistency, and
recall of known gene-gene relationships (EFAAR-style)."""
