"""Chromosome-arm (proximity) correction of a gene map.

CRISPR cutting gives genes on the same chromosome arm similar profiles whatever they do
(Lazar et al., 2024). Genes that are not expressed in the cell type have no biology to show,
so the mean profile of an arm's unexpressed genes estimates that arm's artefact; it is
subtracted from every gene on the arm. It needs two tables from the user: gene -> arm and the
unexpressed genes (no package on the index ships them: efaar-benchmarking's expression files
are Git LFS pointers, not data).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.textables import read_text_table

log = get_logger("maps")


def read_gene_table(path: str | os.PathLike, columns: tuple[str, ...]) -> pd.DataFrame:
    """A CSV/TSV with ``columns`` (gene names stripped); a missing column or file names itself."""
    return read_text_table(path, columns)[list(columns)].apply(lambda c: c.str.strip())


def arm_correction(genes, arms: pd.DataFrame, unexpressed: set[str]):
    """Subtract from each gene the mean profile of the unexpressed genes on its chromosome arm.

    Parameters
    ----------
    genes
        Gene-level map (genes as ``obs_names``).
    arms
        Columns ``gene`` and ``arm``.
    unexpressed
        Genes not expressed in the screen's cells.

    Returns
    -------
    AnnData
        The corrected map; ``uns['arm_correction']`` counts the arms corrected, the genes
        without an arm and the genes on arms without an unexpressed gene (left as they were).
    """
    if arms["gene"].duplicated().any():
        raise CellicaError(f"arm table: gene {arms.loc[arms['gene'].duplicated(), 'gene'].iloc[0]!r} is listed twice")
    arm_of = arms.set_index("gene")["arm"].reindex(genes.obs_names).to_numpy()
    x = np.asarray(genes.X, np.float64).copy()
    is_ref = genes.obs_names.isin(list(unexpressed))
    corrected, left = [], 0
    for arm in pd.unique(arm_of[pd.notna(arm_of)]):
        on = arm_of == arm
        ref = on & is_ref
        if not ref.any():
            left += int(on.sum())
            continue
        x[on] -= x[ref].mean(axis=0)
        corrected.append(str(arm))
    out = genes.copy()
    out.X = x.astype(np.float32)
    info = {"arms_corrected": len(corrected), "genes_without_arm": int(pd.isna(arm_of).sum()),
            "genes_on_arms_without_reference": left, "unexpressed_in_map": int(is_ref.sum())}
    out.uns["arm_correction"] = info
    log.info("chromosome-arm correction: %d arms corrected on %d unexpressed genes; %d genes without an arm and %d "
             "on arms without an unexpressed gene left as they were", len(corrected), info["unexpressed_in_map"],
             info["genes_without_arm"], left)
    return out
