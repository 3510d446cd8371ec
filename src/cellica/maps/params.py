"""Parameters of the gene-map stage (config section ``maps``)."""

from __future__ import annotations

from dataclasses import dataclass

from cellica.core.errors import CellicaError
from cellica.core.params import Params, param

AGGREGATIONS = ("mean", "median")
NORMALIZATIONS = ("center", "center_scale")
# The relationship sources shipped in the efaar-benchmarking wheel (package data only).
ANNOTATION_SOURCES = ("CORUM", "HuMAP", "Reactome", "SIGNOR", "StringDB")


@dataclass(kw_only=True)
class MapParams(Params):
    """Gene-level maps and their benchmarks (`cellica gene-map --help`, `cellica recall --help`).

    Tiles are averaged to wells, wells (optionally normalised per plate on its control wells)
    to guides, guides to genes. Each map is judged by guide consistency and by recall of known
    gene-gene relationships among the most and least similar gene pairs.
    """

    section = "maps"

    aggregate: str = param("mean", "How profiles are combined at each level (tiles -> wells -> guides -> genes).",
                           choices=AGGREGATIONS)
    normalize: str | None = param("center", "Per-plate normalisation of the well profiles on that plate's control "
                                  "wells before aggregation: center subtracts their mean; center_scale also "
                                  "divides by their standard deviation (TVN-style); null keeps the profiles.",
                                  choices=NORMALIZATIONS)
    guide_key: str = param("guide", "Metadata column naming the guide (reagent); without it each well is a "
                           "replicate of its gene.")
    consistency_permutations: int = param(1000, "Random guide sets in the null of the guide-consistency p-values.",
                                          ge=100)
    consistency_fdr: float = param(0.05, "FDR threshold below which a gene's guides agree.", gt=0, le=1)
    drop_inconsistent: bool = param(False, "Leave genes whose guides do not agree out of the map (they are always "
                                    "flagged in the consistency table).")
    arm_table: str | None = param(None, "CSV/TSV of gene -> chromosome arm (columns gene, arm) for the "
                                  "chromosome-arm correction; needs unexpressed_genes. Without both the correction "
                                  "is skipped (logged).")
    unexpressed_genes: str | None = param(None, "CSV/TSV with a gene column: genes not expressed in the screen's "
                                          "cells, whose mean per arm is the arm's artefact.")
    annotations: list[str] = param(list(ANNOTATION_SOURCES), "Known-relationship sources scored by recall "
                                   "(efaar-benchmarking's pair lists; CORUM and SIGNOR are non-commercial).",
                                   item_choices=ANNOTATION_SOURCES, unique=True)
    annotation_file: str | None = param(None, "Your own pair list instead of the shipped sources: CSV/TSV with "
                                        "two gene columns (entity1, entity2) and an optional source column.")
    recall_percentile: float = param(5.0, "Percentile of the null's cosine similarities: a known pair counts as "
                                     "recalled below it or above 100 minus it.", gt=0, lt=50)
    null_pairs: int = param(100000, "Random gene pairs in the null (all pairs when there are fewer).", ge=100)
    min_genes: int = param(10, "Least genes a map needs to be scored.", ge=3)
    seed: int = param(0, "Seed of the consistency permutations, the null pairs and the bootstrap.")
    n_boot: int = param(1000, "Bootstrap resamples of the recall's 95% interval (over genes).", ge=100)

    def check(self) -> None:
        """Refuse an arm correction given only one of its two tables."""
        if (self.arm_table is None) != (self.unexpressed_genes is None):
            raise CellicaError("maps: the chromosome-arm correction needs both arm_table and unexpressed_genes")
