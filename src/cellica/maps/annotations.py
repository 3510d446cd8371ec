"""Known gene-gene relationships: the pair lists shipped in the ``efaar-benchmarking`` wheel
(:mod:`cellica.core.relationships`), or the user's own, as one table of unordered pairs per source."""

from __future__ import annotations

import os

import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.relationships import source_pairs
from cellica.core.textables import read_text_table

log = get_logger("maps")

PAIR_COLUMNS = ["source", "gene_a", "gene_b"]


def unordered_pairs(a: pd.Series, b: pd.Series, source: str) -> pd.DataFrame:
    """Distinct unordered pairs ``gene_a < gene_b`` (self-pairs dropped), labelled ``source``."""
    a, b = a.astype(str).str.strip(), b.astype(str).str.strip()
    lo, hi = a.where(a < b, b), b.where(a < b, a)
    pairs = pd.DataFrame({"source": source, "gene_a": lo.to_numpy(), "gene_b": hi.to_numpy()})
    return pairs[pairs["gene_a"] != pairs["gene_b"]].drop_duplicates(ignore_index=True)


def load_sources(sources: list[str]) -> pd.DataFrame:
    """The wheel's pair lists of ``sources`` (names of :data:`cellica.core.relationships.LICENCES`),
    as :data:`PAIR_COLUMNS`."""
    tables = []
    for source in sources:
        raw = source_pairs(source)
        tables.append(unordered_pairs(raw["entity1"], raw["entity2"], source))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=PAIR_COLUMNS)


def load_pair_file(path: str | os.PathLike) -> pd.DataFrame:
    """A user's pair list: CSV or TSV (the delimiter sniffed: efaar's own ``.txt`` lists are CSV)
    with ``entity1``, ``entity2`` and an optional ``source`` column (default: the file's stem)."""
    raw = read_text_table(path, ("entity1", "entity2"), "pair list")
    if ((raw["entity1"] == "") | (raw["entity2"] == "")).any():
        row = int(((raw["entity1"] == "") | (raw["entity2"] == "")).to_numpy().argmax()) + 2
        raise CellicaError(f"{path}: line {row} has an empty gene name")
    stem = os.path.basename(str(path)).split(".")[0]
    sources = raw["source"] if "source" in raw.columns else pd.Series(stem, index=raw.index)
    parts = [unordered_pairs(g["entity1"], g["entity2"], str(s)) for s, g in raw.groupby(sources, sort=True)]
    return pd.concat(parts, ignore_index=True)


def match_genes(pairs: pd.DataFrame, genes: list[str]) -> tuple[pd.DataFrame, dict[str, dict[str, int]]]:
    """The pairs whose two genes are both in the map, and per source what was left out.

    Returns
    -------
    kept : pandas.DataFrame
        Pairs with both genes in ``genes``.
    coverage : dict
        Per source: ``pairs`` (all), ``pairs_in_map``, ``symbols`` (distinct genes the source
        names), ``symbols_unknown`` (of those, not in the map).
    """
    known = set(genes)
    inside = pairs["gene_a"].isin(known) & pairs["gene_b"].isin(known)
    coverage = {}
    for source, g in pairs.groupby("source", sort=True):
        symbols = set(g["gene_a"]) | set(g["gene_b"])
        coverage[str(source)] = {"pairs": len(g), "pairs_in_map": int(inside[g.index].sum()),
                                 "symbols": len(symbols), "symbols_unknown": len(symbols - known)}
        log.info("%s: %d of %d pairs have both genes in the map; %d of its %d gene symbols are not in the map",
                 source, coverage[str(source)]["pairs_in_map"], len(g), len(symbols - known), len(symbols))
    return pairs[inside].reset_index(drop=True), coverage
