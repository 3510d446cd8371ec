"""The gene-map stage on files: what ``cellica gene-map`` and ``cellica recall`` do (features
.h5ad in; maps .h5ad and parquet tables out, everything computed before anything is written)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from cellica.core.adata import read_h5ad, stored_variant, write_h5ad
from cellica.core.atomic import write_parquet, write_parquets
from cellica.core.contracts import empty_table
from cellica.core.errors import CellicaError, NotComputable
from cellica.core.lineage import KEY, lineage_for, merge, tag
from cellica.core.logs import get_logger
from cellica.maps.params import MapParams

log = get_logger("maps")
PathLike = str | os.PathLike
MIN_LAYOUT_GENES = 4  # a picture of fewer genes says nothing
NOT_COMPUTED = "not_computed"  # .uns of a map the data could not make: the reason


def gene_map(adata, p: MapParams | None = None):
    """A variant's gene-level map and its guides' consistency table.

    Parameters
    ----------
    adata
        Features (tiles or wells) with the contract's metadata.
    p
        Aggregation, normalisation and consistency settings.

    Returns
    -------
    genes : AnnData
        One profile per gene; ``obs`` adds the consistency columns; ``obsm["X_layout"]`` places
        the genes in 2-D (seeded UMAP of the cosine kNN graph, or the first two PCs of a small
        map: ``uns["layout"]`` says which) for maps of at least :data:`MIN_LAYOUT_GENES` genes.
    consistency : pandas.DataFrame
        :data:`cellica.maps._consistency.COLUMNS`, one row per gene.
    """
    from cellica.maps._aggregate import gene_profiles, guide_profiles
    from cellica.maps._consistency import guide_consistency

    p = p or MapParams()
    p.validate()
    guides = guide_profiles(adata, p)
    table = guide_consistency(guides, p)
    drop = table.loc[table["consistent"] == False, "perturbation"].tolist() if p.drop_inconsistent else []  # noqa: E712
    if drop:
        log.info("maps.drop_inconsistent: %d gene(s) left out of the map: %s", len(drop), ", ".join(drop[:20]))
    genes = gene_profiles(guides, p, drop)
    if p.arm_table:
        from cellica.maps.arms import arm_correction, read_gene_table

        reference = set(read_gene_table(p.unexpressed_genes, ("gene",))["gene"])
        genes = arm_correction(genes, read_gene_table(p.arm_table, ("gene", "arm")), reference)
    else:
        log.info("chromosome-arm correction skipped: set maps.arm_table and maps.unexpressed_genes to apply it")
    extra = table.set_index("perturbation").drop(columns="n_guides")
    genes.obs = genes.obs.join(extra, on="perturbation")
    if genes.n_obs >= MIN_LAYOUT_GENES:  # the map's picture, drawn by the report from obsm["X_layout"]
        from cellica.core.coords2d import coords_2d

        xy, how = coords_2d(genes.X, "cosine", p.seed)
        genes.obsm["X_layout"] = np.asarray(xy, np.float64)
        genes.uns["layout"] = {"method": how, "metric": "cosine", "seed": int(p.seed)}
    return genes, table


def gene_map_files(features: PathLike, out: PathLike, consistency_out: PathLike,
                   *, params: MapParams | None = None) -> pd.DataFrame:
    """:func:`gene_map` of one features file; writes the map (``.h5ad``) and the consistency table.

    Parameters
    ----------
    features : PathLike
        One variant's features (``.h5ad``).
    out : PathLike
        The gene map to write (``.h5ad``).
    consistency_out : PathLike
        The guide consistency table to write.
    params : MapParams, optional
        The gene-map stage's parameters.

    Returns
    -------
    pandas.DataFrame
        The guide consistency table.
    """
    adata = read_h5ad(features)
    variant = stored_variant(features, "features")
    try:
        genes, table = gene_map(adata, params)
    except NotComputable as exc:  # an optional product: said, written as such, never the end of the run
        genes, table = not_computed_map(adata, f"not computed: {exc}")
        log.warning("gene map of %s %s", variant, genes.uns[NOT_COMPUTED])
    genes.uns.setdefault("transform", {})["variant"] = variant
    lineage = lineage_for(features, variant)
    genes.uns[KEY] = json.dumps(lineage)
    table.insert(0, "variant", variant)
    write_parquet(tag(table, lineage), consistency_out)
    write_h5ad(genes, out)
    log.info("%s: gene map of %d genes x %d features -> %s", variant, genes.n_obs, genes.n_vars, out)
    return table


def not_computed_map(adata, reason: str):
    """An empty gene map (no genes, ``adata``'s features) that says why it could not be made
    (``uns["not_computed"]``), and an empty consistency table with the same reason."""
    import anndata as ad

    from cellica.maps._consistency import COLUMN_TYPES

    genes = ad.AnnData(np.zeros((0, adata.n_vars), np.float32), var=pd.DataFrame(index=adata.var_names.copy()))
    genes.uns[NOT_COMPUTED] = reason
    return genes, empty_table(COLUMN_TYPES, reason)


def read_map(path: PathLike):
    """A gene map written by :func:`gene_map_files` (genes as ``obs_names``), checked against
    its seal (:func:`cellica.core.adata.read_sealed`).

    Parameters
    ----------
    path : PathLike
        A gene map (``.h5ad``).

    Returns
    -------
    anndata.AnnData
        The map, genes as ``obs_names``.
    """
    from cellica.core.adata import read_sealed

    return read_sealed(path)


def known_pairs(p: MapParams) -> pd.DataFrame:
    """The pair list the recall scores: the user's file, or the shipped sources."""
    from cellica.maps.annotations import load_pair_file, load_sources

    return load_pair_file(p.annotation_file) if p.annotation_file else load_sources(list(p.annotations))


def recall_files(maps: Sequence[PathLike], out: PathLike, differences_out: PathLike,
                 *, params: MapParams | None = None) -> pd.DataFrame:
    """Recall of known relationships by every variant's map (and paired differences between
    variants); the recall table also counts each source's gene symbols that are not in the map.

    Parameters
    ----------
    maps : sequence of PathLike
        Every variant's gene map.
    out : PathLike
        The recall table to write.
    differences_out : PathLike
        The paired differences table to write.
    params : MapParams, optional
        The gene-map stage's parameters.

    Returns
    -------
    pandas.DataFrame
        The recall table.
    """
    from cellica.maps.annotations import match_genes
    from cellica.maps.recall import recall_tables
    from cellica.registry import PAIRS

    p = params or MapParams()
    p.validate()
    loaded = {stored_variant(path, str(path)): read_map(path) for path in maps}
    lineage = merge([(str(path), json.loads(str(m.uns.get(KEY, "{}")))) for path, m in zip(maps, loaded.values(),
                                                                                             strict=True)], "recall")
    reasons = [str(m.uns[NOT_COMPUTED]) for m in loaded.values() if NOT_COMPUTED in m.uns]
    if reasons:  # a map the data could not make: no recall either, and the tables say why
        from cellica.maps.recall import not_computed_tables

        recall, differences = not_computed_tables(list(loaded), 0, reasons[0])
        write_parquets([tag(recall, lineage), tag(differences, lineage)], [out, differences_out])
        return recall
    pairs = known_pairs(p)
    # recall_tables checks the names (case-only duplicates, the same genes in every map).
    kept, coverage = match_genes(pairs, list(map(str, next(iter(loaded.values())).obs_names)))
    sources = sorted(set(pairs["source"]))
    recall, differences = recall_tables(loaded, kept, p, PAIRS, sources)
    cover = pd.DataFrame.from_dict(coverage, orient="index").rename_axis("source").reset_index()
    recall = recall.merge(cover[["source", "pairs", "symbols", "symbols_unknown"]], on="source", how="left")
    for row in recall[recall["source"] == "all"].itertuples():
        log.info("%s: recall of %d known pairs %.3f (95%% CI %.3f-%.3f; null %.3f)", row.variant, row.n_pairs,
                 row.recall, row.ci_low, row.ci_high, row.null_recall)
    write_parquets([tag(recall, lineage), tag(differences, lineage)], [out, differences_out])
    return recall


def efaar_files(maps: Sequence[PathLike], out: PathLike, params: MapParams | None = None) -> pd.DataFrame:
    """Every variant's gene map in EFAAR_benchmarking's layout, and its recall by their
    definition (:mod:`cellica.maps._efaar`): ``out/<variant>/features.parquet`` and
    ``metadata.parquet`` (the folder is the variant's safe file name, listed in the table),
    ``out/recall.parquet`` (a ``variant`` and a ``folder`` column, then EFAAR's columns).
    Everything is computed first and the folder is committed whole."""
    from cellica.core.atomic import atomic_output
    from cellica.core.names import safe_filename
    from cellica.maps._efaar import efaar_recall, map_tables

    p = params or MapParams()
    p.validate()
    pairs = known_pairs(p)
    loaded = [(str(path), read_map(path)) for path in maps]
    # The maps of one run only (as recall_files): a map swapped in from another run is an error.
    merge([(path, json.loads(str(m.uns.get(KEY, "{}")))) for path, m in loaded], "export-efaar")
    exported, tables = {}, []
    for path, m in loaded:
        variant = stored_variant(path, path)
        if safe_filename(variant) in exported:
            raise CellicaError(f"export-efaar: {path} is a second map of variant {variant!r}; give one per variant")
        if NOT_COMPUTED in m.uns:  # nothing to export: the recall table says why
            log.warning("export-efaar: the map of %s is %s", variant, m.uns[NOT_COMPUTED])
            tables.append(pd.DataFrame([{"variant": variant, "folder": "", "note": str(m.uns[NOT_COMPUTED])}]))
            continue
        exported[safe_filename(variant)] = map_tables(m)
        recall = efaar_recall(m, pairs)
        recall.insert(0, "variant", variant)
        recall.insert(1, "folder", safe_filename(variant))
        tables.append(recall)
    recall = pd.concat(tables, ignore_index=True)
    with atomic_output(out, overwrite=True) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)  # the folder, also when no map could be exported
        for folder, (features, metadata) in exported.items():
            (tmp / folder).mkdir(parents=True)
            features.to_parquet(tmp / folder / "features.parquet")
            metadata.to_parquet(tmp / folder / "metadata.parquet")
        recall.to_parquet(tmp / "recall.parquet")
    log.info("EFAAR layout: %d map(s) and their recall -> %s", len(exported), out)
    return recall
