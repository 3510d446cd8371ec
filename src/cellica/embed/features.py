"""Bring your own features: embeddings or CellProfiler profiles enter at the transform stage.

``cellica import-features TABLE --out features.h5ad`` reads an ``.h5ad``, parquet,
CSV or TSV (optionally gzipped) table with metadata columns and numeric feature
columns and writes the same AnnData contract as ``cellica embed``, its features in name
order (:func:`cellica.core.names.natural_key`), so no number depends on the table's column
order.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.core.adata import OBS_REQUIRED, make_adata, read_h5ad, write_h5ad
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.names import missing_columns_message, natural_key
from cellica.embed._tables import (
    Table,
    feature_twins,
    fill_matrix,
    first_duplicate,
    row_hashes,
    sha256,
)
from cellica.embed.params import FeatureTableParams

log = get_logger("features")
# Plate-layout names that are metadata even when numeric and not declared.
LAYOUT_NAMES = {"site", "field", "fov", "tile", "row", "column", "col", "well", "plate", "x", "y", "replicate",
                "image", "imagenumber", "objectnumber", "tile_id", "sample_id", "guide", "sgrna", "concentration",
                "dose", "time", "timepoint"}


def import_features(path: str | os.PathLike, out: str | os.PathLike | None = None,
                    params: FeatureTableParams | None = None):
    """Read embeddings or profiles from a table into the AnnData features contract.

    Parameters
    ----------
    path
        ``.h5ad`` (validated as is), ``.parquet``, ``.csv`` or ``.tsv`` (``.gz`` allowed).
    out
        Where to write the ``.h5ad`` (optional).
    params
        Metadata mapping and which columns are features.
    """
    p = params or FeatureTableParams()
    path = Path(path)
    if not path.is_file():
        raise CellicaError(f"features table {path} does not exist")
    if path.suffix == ".h5ad":
        adata = read_h5ad(path)
        order = sorted(range(adata.n_vars), key=lambda i: natural_key(adata.var_names[i]))
        if order != list(range(adata.n_vars)):
            log.info("%s: features put in name order (the results do not depend on the file's column order)", path)
            adata = adata[:, order].copy()
    else:
        adata = _table_to_adata(Table(path), p, path)
    _check_twins(adata, p, path)
    log.info("read %d samples x %d features from %s (%d controls, %d batches, %d perturbations)",
             adata.n_obs, adata.n_vars, path, int(adata.obs["is_control"].sum()),
             adata.obs["batch"].nunique(), adata.obs.loc[~adata.obs["is_control"], "perturbation"].nunique())
    if out is not None:
        write_h5ad(adata, out)
    return adata


def _check_twins(adata, p: FeatureTableParams, path: Path) -> None:
    """Rows whose features all equal another row's (under another id) are one sample counted twice
    unless the user says otherwise (``duplicate_features: keep``, logged): never a silent choice."""
    n, row, twin = feature_twins(np.asarray(adata.X))
    if not n:
        return
    ids = adata.obs_names
    what = (f"features table {path}: {n} row(s) repeat another row's features exactly under other metadata, e.g. "
            f"{ids[row]!r} repeats {ids[twin]!r}")
    if p.duplicate_features == "refuse":
        raise CellicaError(f"{what}; drop the copies, or set features.duplicate_features: keep if they are distinct "
                           "samples (e.g. empty wells profiled as all zeros)")
    log.warning("%s; kept as distinct samples (features.duplicate_features: keep)", what)


# Names of identifiers, not measurements: pandas' saved index, row numbers, ids. An inferred
# feature set refuses them unless the user names them (features.columns or extra_metadata).
ID_LIKE = re.compile(r"^(Unnamed: ?\d+|index|level_\d+|__index_level_\d+__|id|[A-Za-z]*Number|.*_id|[A-Za-z]+Id)$",
                     re.IGNORECASE)


def _split_columns(header: pd.DataFrame, p: FeatureTableParams, path: Path) -> tuple[list[str], list[str]]:
    """The metadata columns (declared, matching the regex, or named like plate layout) and
    the feature columns, from the table's header (or exactly ``p.columns`` when given)."""
    import fnmatch

    absent = [src for src in p.column_map.values() if src not in header.columns]
    if absent:
        raise CellicaError(f"features table {path}: " + missing_columns_message(absent, header.columns,
                                                                                  "features.column_map"))
    regex = re.compile(p.metadata_regex) if p.metadata_regex else None
    mapped = set(p.column_map.values())
    declared = {*mapped, *p.extra_metadata, *OBS_REQUIRED, *([p.id_column] if p.id_column else [])}
    if p.columns:
        features = [c for c in header.columns if c not in declared
                    and any(fnmatch.fnmatchcase(str(c), pat) for pat in p.columns)]
        unmatched = [pat for pat in p.columns if not any(fnmatch.fnmatchcase(str(c), pat) for c in features)]
        if unmatched:
            raise CellicaError(f"features table {path}: features.columns entr{'y' if len(unmatched) == 1 else 'ies'}"
                               f" {unmatched[:5]} match no column (it has {len(header.columns)}: "
                               f"{list(header.columns[:6])} ...)")
        return [c for c in header.columns if c not in features], features
    is_meta = [c in declared or (regex is not None and bool(regex.search(c))) for c in header.columns]
    # Layout columns are never features, whatever their type (a numeric `site` would otherwise
    # become one): they are kept as metadata, and the log says so.
    layout = [c for c, m in zip(header.columns, is_meta, strict=True) if not m and c.lower() in LAYOUT_NAMES]
    if layout:
        log.warning("features table %s: column(s) %s look like plate-layout metadata and are kept as metadata, "
                    "not features (declare them in extra_metadata to silence this)", path, layout)
        is_meta = [m or c in layout for c, m in zip(header.columns, is_meta, strict=True)]
    features = [c for c, m in zip(header.columns, is_meta, strict=True) if not m]
    ids = [c for c in features if ID_LIKE.match(str(c))]
    if ids:
        raise CellicaError(f"features table {path}: column(s) {ids[:6]} look like identifiers, not features "
                           "(a saved index, a row number or an id); declare them in features.extra_metadata, or "
                           "list the feature columns in features.columns")
    return [c for c in header.columns if c not in features], features


def _metadata(columns: pd.DataFrame, p: FeatureTableParams, path: Path) -> pd.DataFrame:
    """Metadata mapped to our names, plus every other metadata column."""
    meta = pd.DataFrame({ours: columns[theirs] for ours, theirs in p.column_map.items()})
    other_meta = [c for c in columns.columns if c not in meta.columns]
    for c in other_meta:
        meta[c] = columns[c]
    missing = [c for c in OBS_REQUIRED if c not in meta.columns]
    if missing:
        raise CellicaError(
            f"features table {path}: missing metadata column(s) {missing}; map them with column_map "
            f"(metadata columns found: {other_meta[:12]})"
        )
    return meta


def _table_to_adata(table: Table, p: FeatureTableParams, path: Path):
    """The AnnData of a features table: checked features, unique sample ids, provenance."""
    meta_cols, feature_cols = _split_columns(table.header, p, path)
    columns = table.columns(meta_cols)
    meta = _metadata(columns, p, path)
    non_numeric = [c for c in feature_cols if not pd.api.types.is_numeric_dtype(table.header[c])]
    if non_numeric:
        raise CellicaError(
            f"features table {path}: non-numeric feature column(s) {non_numeric[:5]}; "
            "declare them as metadata (metadata_regex or extra_metadata)"
        )
    if not feature_cols:
        raise CellicaError(f"features table {path}: no numeric feature columns")
    # One order of features whatever the table's: a classifier's column sampling (LightGBM's
    # feature_fraction) picks features by position, so the file's column order must not matter.
    feature_cols = sorted(feature_cols, key=natural_key)
    meta.index = _sample_ids(columns, meta, p.id_column, path)
    hashes = None if p.id_column else row_hashes(columns)
    del columns
    x, bad_cols, bad_rows = fill_matrix(table, feature_cols, hashes)
    if hashes is not None:
        n_dup, first = first_duplicate(table, hashes)
        if n_dup:
            raise CellicaError(f"features table {path}: {n_dup} row(s) repeat another row exactly "
                               f"(metadata and features), first at row {first + 2}; "
                               "drop the duplicates, or give an id_column if they are distinct samples")
    log.info("features table %s: %d feature column(s), %s; %d metadata column(s): %s", path, len(feature_cols),
             feature_cols[0] if len(feature_cols) == 1 else f"{feature_cols[0]} ... {feature_cols[-1]}",
             len(meta_cols), ", ".join(map(str, meta_cols)))
    if bad_cols.any():
        nan_cols = [c for c, bad in zip(feature_cols, bad_cols, strict=True) if bad]
        raise CellicaError(f"features table {path}: NaN/Inf in feature column(s) {nan_cols[:5]} "
                           f"({bad_rows} row(s)); impute or drop them first")
    prov = {"source": "features", "table": str(path.resolve()), "table_sha256": sha256(path),
            "params": asdict(p), "cellica_version": __version__}
    order = content_order(x)
    if not np.array_equal(order, np.arange(len(order))):
        x, meta = x[order], meta.iloc[order]
        log.info("features table %s: rows put in the order of their feature values (the results do not depend on "
                 "the table's row order)", path)
    return make_adata(x, meta, feature_cols, {"provenance": prov}, f"features table {path}")


def content_order(x: np.ndarray, lead: int = 4) -> np.ndarray:
    """The rows of ``x`` in the lexicographic order of their values (first column first): an
    order that depends on no label and no row order, and that a change of any feature's unit
    (a positive factor, an added constant) keeps. Rows equal in every feature keep their order.

    Sorting on the first ``lead`` columns settles almost every row; only when two rows tie on
    all of those are all columns used."""
    x = np.asarray(x)
    if len(x) < 2:
        return np.arange(len(x))
    keys = x[:, : min(lead, x.shape[1])]
    order = np.lexsort(keys[:, ::-1].T)
    if keys.shape[1] < x.shape[1] and (keys[order[1:]] == keys[order[:-1]]).all(axis=1).any():
        order = np.lexsort(x[:, ::-1].T)
    return order


def _sample_ids(table: pd.DataFrame, meta: pd.DataFrame, id_column: str | None, path: Path) -> pd.Index:
    if id_column:
        if id_column not in table.columns:
            raise CellicaError(f"features table {path}: id_column {id_column!r} is absent")
        ids = table[id_column].astype(str)
        if not ids.is_unique:
            raise CellicaError(f"features table {path}: id_column {id_column!r} has duplicates, e.g. "
                               f"{ids[ids.duplicated()].iloc[:3].tolist()}")
        return pd.Index(ids.to_numpy(), dtype=str)
    base = meta["plate"].astype(str) + "/" + meta["well"].astype(str)
    if base.is_unique:
        return pd.Index(base.to_numpy(), dtype=str)
    return pd.Index((base + "/" + base.groupby(base).cumcount().astype(str)).to_numpy(), dtype=str)
